package shardcache

import "github.com/reignpipe/reignpipe/stages/shardcache/internal/inuse"

// InUseError is a cache another process has open: its index is locked (one writer at a time),
// so this one cannot open it. Its message names the directory, the holding process when the
// kernel tells it, and what to do.
type InUseError = inuse.Error
