// Package parts opens what a pipeline's config names -- the ONNX Runtime environment, the GN,
// its tokenizer, the chunk cache and the document aggregator -- in one place, for every command
// and both runners, with one Close. Each caller asks only for what it uses, and the ONNX Runtime
// is made only for a part that runs a session.
package parts

import (
	"errors"
	"fmt"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
	"github.com/reignpipe/reignpipe/stages/shardcache"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

// Want says which parts to open beyond the GN's identity (its fingerprint and dimension,
// read from its files), which is always there.
type Want struct {
	// Embed: the GN will run forward passes, so it is loaded as an ONNX Runtime session with the
	// configured provider and threads. Without it no GN session is made: the space the cache
	// and the aggregators are keyed by is Identify's.
	Embed bool
	// Tokenizer loads the GN's WordPiece vocabulary.
	Tokenizer bool
	// Cache opens the chunk cache in the GN's space.
	Cache bool
	// Scan: the cache's manifests are read once, in order (reaggregate), so its index keeps a
	// small block cache: a scan's blocks are not read again, and a full one would fill the
	// default 64 MiB for nothing.
	Scan bool
	// Aggregator builds the configured document aggregation (and its GN mean-pool companion).
	Aggregator bool
}

// Parts are the opened parts; the fields Want left out are nil.
type Parts struct {
	// GN is the GN's identity: its fingerprint and dimension name every space below. Always set.
	GN gn.Identity
	// Runtime is the process's ONNX Runtime environment, made only for a part that runs a
	// session: the GN with Want.Embed, or a REIGN aggregator. Model is the GN session (Embed).
	Runtime   *gn.Runtime
	Model     *gn.Model
	Tokenizer *wordpiece.Tokenizer
	Cache     *shardcache.Cache
	// Aggregator is the configured aggregation; Companion the GN mean-pool published beside a
	// REIGN vector (nil for mean-pool pipelines, whose vector already is that one).
	Aggregator, Companion aggregate.Aggregator
	Params                chunk.Params

	closers []func() error // in opening order; Close runs them backwards
}

// Open opens cfg's parts. On an error everything opened so far is closed again.
func Open(cfg *pipelines.Config, want Want) (_ *Parts, err error) {
	p := &Parts{Params: chunk.Params{K: cfg.Chunking.K, S: cfg.Chunking.S}}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	// Mean-pool over cached chunks (reaggregate, verify, eval on a warm cache) needs only the
	// GN's identity, so it neither needs the ONNX Runtime library nor pays for a session; the
	// registry says which aggregations run one.
	agg, _ := components.Builtin().Aggregator(cfg.Aggregate.Type)
	if err := cfg.GN.CheckFiles(); err != nil { // before the runtime: the commonest first-run miss
		return nil, err
	}
	if want.Embed || want.Aggregator && agg.Session {
		lib, err := cfg.LibraryPath()
		if err != nil {
			return nil, err
		}
		if p.Runtime, err = gn.NewRuntime(lib); err != nil {
			return nil, err
		}
		p.closers = append(p.closers, p.Runtime.Close)
	}
	modelPath, tokPath := cfg.GN.ModelPaths()
	if want.Tokenizer {
		if p.Tokenizer, err = wordpiece.Load(tokPath); err != nil {
			return nil, fmt.Errorf("GN tokenizer: %w (run ops/fetch?)", err)
		}
	}
	mc := gn.Config{Name: cfg.GN.Name, Model: modelPath, Tokenizer: tokPath}
	if want.Embed {
		mc.Provider, mc.IntraOpThreads, mc.InterOpThreads = cfg.GN.Provider, cfg.GN.IntraOpThreads, cfg.GN.InterOpThreads
		if p.Model, err = p.Runtime.Load(mc); err != nil {
			return nil, fmt.Errorf("GN model: %w", err)
		}
		p.closers = append(p.closers, p.Model.Close)
		p.GN = p.Model.Identity()
	} else if p.GN, err = gn.Identify(mc); err != nil {
		return nil, fmt.Errorf("GN model: %w", err)
	}
	if want.Cache {
		var indexCache int64 // the default
		if want.Scan {
			indexCache = scanIndexCache
		}
		p.Cache, err = shardcache.Open(shardcache.Options{
			IndexCacheBytes: indexCache,
			Dir:             cfg.Cache.Dir, Fingerprint: p.GN.Fingerprint, Dim: p.GN.Dim, K: p.Params.K, S: p.Params.S,
			RowsPerShard: cfg.Cache.RowsPerShard, DeleteRetention: cfg.Run.DeleteRetention.Duration,
		})
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, p.Cache.Close)
	}
	if want.Aggregator {
		var closeAgg func()
		if p.Aggregator, p.Companion, closeAgg, err = BuildAggregator(p.Runtime, cfg, p.GN, p.Params); err != nil {
			return nil, err
		}
		p.closers = append(p.closers, func() error { closeAgg(); return nil })
	}
	return p, nil
}

// scanIndexCache is the index's block cache for a cache read by one scan.
const scanIndexCache = 4 << 20

// Close releases every part, the last opened first (the cache flushes), and returns what
// failed.
func (p *Parts) Close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}

// BuildAggregator makes the configured document aggregation, through its type in the component
// registry (a REIGN checkpoint is checked against the GN and window setting in use before
// anything runs); close releases its sessions (a no-op for mean-pool). rt may be nil for
// mean-pool, which runs no session.
func BuildAggregator(rt *gn.Runtime, cfg *pipelines.Config, id gn.Identity, p chunk.Params) (agg, companion aggregate.Aggregator, close func(), err error) {
	a, ok := components.Builtin().Aggregator(cfg.Aggregate.Type)
	if !ok {
		return nil, nil, nil, fmt.Errorf("no aggregation %q", cfg.Aggregate.Type)
	}
	b, err := a.Build(registry.AggregatorEnv{
		Config: cfg.Aggregate, Runtime: rt, GN: id, GNName: cfg.GN.Name, Params: p,
		Provider: cfg.GN.Provider, IntraOpThreads: cfg.GN.IntraOpThreads, InterOpThreads: cfg.GN.InterOpThreads,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return b.Aggregator, b.Companion, b.Close, nil
}
