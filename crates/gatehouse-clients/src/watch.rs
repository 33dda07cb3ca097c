//! watcher (next)
