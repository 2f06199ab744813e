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

/// How long (ms) mimalloc keeps memory freed before it gives it back to the system. mimalloc 3
/// keeps it a second by default (and its arenas ten times as long): every buffer a commit
/// freed within the last second still counted in the process's memory. Measured, one run each,
/// default against 100 ms: a Kafka run of `stats.stream` over 300,000 trades peaked at 617 MB
/// against 394 MB; `bench/state.py`'s 3 M keys in random order with 64 MiB, 193 MiB against
/// 173 MiB (its bound is 192); the embedded `stats.stream` over 1 M trades, 93 MB against
/// 82 MB, for about 5 % more CPU time (10 ms took 15 % more).
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// Set the allocator up for a long-running process (call first thing in `main`): freed memory
/// goes back to the system after [`PURGE_DELAY_MS`].
pub fn configure_allocator() {
    use mimalloc as _;
    extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    // `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (include/mimalloc.h); the
    // libmimalloc-sys crate names no constant for it.
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    // SAFETY: mimalloc's `void mi_option_set(mi_option_t option, long value)`, callable at any
    // time; an option it reads lazily takes the value from then on.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}
