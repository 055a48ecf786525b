# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Rank 1 never joins: rank 0's init() must fail within DDP_START_TIMEOUT_SECONDS naming it."""
import os
import time

import ddp

if os.environ["DDP_RANK"] == "1":
    time.sleep(120)
ddp.init()
