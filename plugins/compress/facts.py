"""Facts by rules, now in the kit (`compactor.kit`, section "facts"): kept importable from here.

The sentence facts of `compress.fact_centric`, `compress.chunk_filtering`, `compress.summarization`
and `compress.topics` live in `compactor.kit`, which every component (and a third-party plugin) may
import; this module only names them for code that imports them from their old place.
"""

from __future__ import annotations

from compactor.kit import BRIDGE_FROM as BRIDGE_FROM
from compactor.kit import BRIDGE_SHARE as BRIDGE_SHARE
from compactor.kit import COVERAGE_WEIGHT as COVERAGE_WEIGHT
from compactor.kit import MAX_FACT_TOKENS as MAX_FACT_TOKENS
from compactor.kit import MIN_CJK as MIN_CJK
from compactor.kit import MIN_WORDS as MIN_WORDS
from compactor.kit import PRIOR_WEIGHT as PRIOR_WEIGHT
from compactor.kit import SPECIFICITY_WEIGHT as SPECIFICITY_WEIGHT
from compactor.kit import Candidate as Candidate
from compactor.kit import candidates as candidates
from compactor.kit import fact_id as fact_id
from compactor.kit import fit_facts as fit_facts
from compactor.kit import keep_facts as keep_facts
from compactor.kit import merge_facts as merge_facts
from compactor.kit import page_title as page_title
from compactor.kit import parse_llm_facts as parse_llm_facts
from compactor.kit import rule_facts as rule_facts
from compactor.kit import same_fact as same_fact
from compactor.kit import scored_sentences as scored_sentences
from compactor.kit import with_input_spans as with_input_spans
