from nodecert.cli import main

main()
