from llm_knee.cli import main

main()
