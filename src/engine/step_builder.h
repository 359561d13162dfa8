// BuildStepInputs: flattens a scheduled batch into the arrays a backend consumes (StepInputs,
// backend/step.h): token ids, positions, slot mapping, cu_seqlens, block tables, and per
// sequence what to sample and score.
#pragma once

#include "backend/step.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"

namespace kiln {

// The spans inside the result point into the batch's requests; keep them unchanged until the
// step has executed.
StepInputs BuildStepInputs(const ScheduledBatch& batch, const KvCacheManager& kv);

}  // namespace kiln
