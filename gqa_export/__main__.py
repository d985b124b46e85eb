from gqa_export.cli import main

main()
