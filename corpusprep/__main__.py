from corpusprep.app import main

main()
