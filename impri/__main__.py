from impri.cli import main

main()
