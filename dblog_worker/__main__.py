import sys

from dblog_worker.cli import main

sys.exit(main())
