"""run_id.py MANIFEST: prints the run id a checkpoint manifest records."""
import json
import sys

print(json.load(open(sys.argv[1]))["run"])
