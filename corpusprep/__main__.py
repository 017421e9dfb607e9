from corpusprep.app import cli

cli()
