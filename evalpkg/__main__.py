from evalpkg.cli import main

if __name__ == "__main__":  # a spawned process (reference worlds built in parallel) imports this without running it
    main()
