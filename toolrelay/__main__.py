from toolrelay.cli import main

main()
