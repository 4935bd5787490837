"""``python -m kafkastate.cli``: the ``kafkastate`` command line."""

import sys

from kafkastate.cli import main

sys.exit(main())
