from cheaptune.cli.main import main

main()
