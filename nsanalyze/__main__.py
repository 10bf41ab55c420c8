from nsanalyze.cli import run

run()
