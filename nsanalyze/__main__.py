from nsanalyze.cli import main

main()
