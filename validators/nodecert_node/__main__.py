import sys

if sys.argv[1:2] == ["local-run"]:
    from nodecert_node.local import main as local_main

    sys.exit(local_main(sys.argv[2:]))
if sys.argv[1:2] == ["slurm-health"]:
    from nodecert_node.slurmhealth import main as health_main

    sys.exit(health_main(sys.argv[2:]))
from nodecert_node.runner import main

sys.exit(main(sys.argv[1:]))
