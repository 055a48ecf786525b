# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`python -m ddp_model ...`: the ddp-model command."""
import sys

from . import main

sys.exit(main())
