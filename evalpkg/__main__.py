from evalpkg.cli import main

main()
