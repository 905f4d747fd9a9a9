"""Operations: the CLI, batch runs, HTML reports and the run monitor."""
