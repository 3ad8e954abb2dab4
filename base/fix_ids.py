"""The recommendations' ids: what each fix is called in the report's JSON, the Markdown,
the app's keys and a strategy's declaration of the fixes that show its routes. Spelled
here once; everything else names them by these constants.

May import: nothing.
"""

from __future__ import annotations

#: Storage and placement.
RAISE_READAHEAD = "raise-readahead"
PREWARM = "prewarm"
COPY_TO_LOCAL_DISK = "copy-to-local-disk"
MOVE_OFF_WSL_DRIVE = "move-off-wsl-drive"
#: A bucket mounted through FUSE read with the store's own client instead (``--bucket``).
READ_BUCKET_DIRECTLY = "read-bucket-directly"
STORAGE_STALLED = "storage-stalled"
#: How the model is read.
PARALLEL_READS = "parallel-reads"
READ_WHOLE_FILES = "read-whole-files"
GPU_STAGED = "gpu-staged"
#: Several ranks on a node.
BROADCAST = "broadcast"
READ_ONCE_PER_NODE = "read-once-per-node"
#: Memory and format.
MEMORY_LIMIT = "memory-limit"
CONVERT_TO_SAFETENSORS = "convert-to-safetensors"
USE_SAFETENSORS_BESIDE = "use-safetensors-beside"

#: Every id, in the order above.
ALL = (
    RAISE_READAHEAD,
    PREWARM,
    COPY_TO_LOCAL_DISK,
    MOVE_OFF_WSL_DRIVE,
    READ_BUCKET_DIRECTLY,
    STORAGE_STALLED,
    PARALLEL_READS,
    READ_WHOLE_FILES,
    GPU_STAGED,
    BROADCAST,
    READ_ONCE_PER_NODE,
    MEMORY_LIMIT,
    CONVERT_TO_SAFETENSORS,
    USE_SAFETENSORS_BESIDE,
)
