from threshold.cli import main

main()
