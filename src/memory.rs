//! The process's memory: what the allocator keeps.

/// Give the memory the calling thread freed back to the system. mimalloc returns a thread's
/// freed pages only when that thread allocates again: a background thread that sleeps after its
/// work (the compactor, the local-state writer) would keep what its last job freed, up to tens
/// of MB (a 3 M-key run with `statestore.cache.max.bytes` of 64 MiB peaked at 211 MiB instead
/// of 145). (`mi_collect` is part of the mimalloc library the allocator links; without it as the
/// allocator it has nothing to collect.)
pub(crate) fn release_freed_memory() {
    // (Named, so that the library links mimalloc's in every build of it, its tests too.)
    use mimalloc as _;
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mimalloc's `void mi_collect(bool force)`, callable from any thread at any time.
    unsafe { mi_collect(true) }
}
