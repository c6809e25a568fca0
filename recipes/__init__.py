"""The recipes: scripts to run and edit (recipes/README.md). A package only so that one recipe can import another's
functions (``from recipes import train_multiturn``); none runs another."""
