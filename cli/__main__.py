"""``python -m streamgrpo.cli``: the same as the ``streamgrpo`` console script."""

from streamgrpo.cli import main

main()
