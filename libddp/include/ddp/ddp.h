// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp public C++ API: include this one header.
#pragma once

#include "ddp/context.h"     // IWYU pragma: export
#include "ddp/errors.h"      // IWYU pragma: export
#include "ddp/info.h"        // IWYU pragma: export
#include "ddp/launch.h"      // IWYU pragma: export
#include "ddp/memory.h"      // IWYU pragma: export
#include "ddp/options.h"     // IWYU pragma: export
#include "ddp/ps.h"          // IWYU pragma: export
#include "ddp/rendezvous.h"  // IWYU pragma: export
#include "ddp/types.h"       // IWYU pragma: export
#include "ddp/version.h"     // IWYU pragma: export
