import sys

from nodecert_node.runner import main

sys.exit(main(sys.argv[1:]))
