// Package registry holds the types of the component registry: a source, sink or aggregator type
// declares here its type name, the configuration keys that apply to it (with their default and
// a one-line doc), its validation and its constructor, in one place. The built-in components
// are in package pipelines/components; the loader (package pipelines) checks a definition's
// component sections against them, and the runners open components through them.
//
// The configuration sections a component reads (source, sinks[], aggregate) are declared here
// too, so that the components need not import the loader; package pipelines names them as its
// own, and the YAML shape is the loader's.
package registry

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// Key is one configuration key of a component, relative to its section ("sections" for
// source.sections).
type Key struct {
	Name    string
	Default string // as the README's key table writes it
	Doc     string // one line
}

// Bad reports a bad value of key (relative to the section) with its YAML line.
type Bad func(key, format string, args ...any) error

// Source is a source type (source.type).
type Source struct {
	Type string
	Doc  string
	// Keys are the source keys that apply to this type beyond the ones every source reads
	// (Registry.SourceKeys). A key that another type declares and this one does not is refused
	// when set away from its default.
	Keys     []Key
	Validate func(c SourceConfig, bad Bad) error // nil: nothing beyond the keys
	Open     func(c SourceConfig) (connectors.Source, error)
}

// Sink is a sink type (sinks[].type).
type Sink struct {
	Type     string
	Doc      string
	Keys     []Key
	Validate func(c SinkConfig, bad Bad) error
	Open     func(c SinkConfig, env SinkEnv) (connectors.Sink, error)
	// Output names where the sink writes, for the run summary.
	Output func(c SinkConfig) string
	// Transport is the transport.type the sink needs ("" = any): where its connection
	// settings live.
	Transport string
}

// SinkEnv is what a sink is opened with besides its section.
type SinkEnv struct {
	Dim   int // the document vectors' dimension
	GNDim int // > 0: vectors carry their GN mean-pool companion of that dimension
	// Meta (GN fingerprint, K, S) goes into file metadata where the format has it.
	Meta map[string]string
	// Kafka opens a vector sink on a topic; nil outside the distributed stages.
	Kafka func(c SinkConfig) (connectors.Sink, error)
	// Key is the sink's place in the pipeline file ("sinks[1]"), for the messages of checks
	// that can only run when it opens (a dimension the index cannot take).
	Key string
}

// Aggregator is an aggregation type (aggregate.type).
type Aggregator struct {
	Type     string
	Doc      string
	Keys     []Key
	Validate func(c AggregateConfig, bad Bad) error
	Build    func(env AggregatorEnv) (Built, error)
	// Session: the aggregation runs an ONNX Runtime session, so it is built with the
	// process's runtime; without it the runtime is nil and need not be loadable.
	Session bool
}

// AggregatorEnv is what an aggregation is built with: the ONNX Runtime environment (nil unless
// the aggregation runs a session), the identity of the GN whose space it reads, and the GN's
// execution settings.
type AggregatorEnv struct {
	Config                         AggregateConfig
	Runtime                        *gn.Runtime
	GN                             gn.Identity
	GNName                         string
	Provider                       string
	IntraOpThreads, InterOpThreads int
	Params                         chunk.Params
}

// Built is a built aggregation: the document aggregator, the GN mean-pool published beside it
// (nil when the aggregator already is that one), and Close, which releases its sessions.
type Built struct {
	Aggregator, Companion aggregate.Aggregator
	Close                 func()
}

// Registry is a set of component types, in the order help lists them.
type Registry struct {
	Sources     []Source
	Sinks       []Sink
	Aggregators []Aggregator
	// SourceKeys are the source keys every source type reads.
	SourceKeys []Key
}

// Validate checks the registry itself: every type named once and with its constructor.
func (r *Registry) Validate() error {
	seen := map[string]bool{}
	check := func(role, typ string, ok bool) error {
		if typ == "" || seen[role+" "+typ] || !ok {
			return fmt.Errorf("%s %q: registered twice, unnamed or without a constructor", role, typ)
		}
		seen[role+" "+typ] = true
		return nil
	}
	for _, s := range r.Sources {
		if err := check("source", s.Type, s.Open != nil); err != nil {
			return err
		}
	}
	for _, s := range r.Sinks {
		if err := check("sink", s.Type, s.Open != nil && s.Output != nil); err != nil {
			return err
		}
	}
	for _, a := range r.Aggregators {
		if err := check("aggregator", a.Type, a.Build != nil); err != nil {
			return err
		}
	}
	return nil
}

// Source looks a source type up.
func (r *Registry) Source(typ string) (Source, bool) { return find(r.Sources, typ, sourceType) }

// Sink looks a sink type up.
func (r *Registry) Sink(typ string) (Sink, bool) { return find(r.Sinks, typ, sinkType) }

// Aggregator looks an aggregation type up.
func (r *Registry) Aggregator(typ string) (Aggregator, bool) {
	return find(r.Aggregators, typ, aggregatorType)
}

// SourceTypes, SinkTypes and AggregatorTypes are the registered type names, in order.
func (r *Registry) SourceTypes() []string     { return names(r.Sources, sourceType) }
func (r *Registry) SinkTypes() []string       { return names(r.Sinks, sinkType) }
func (r *Registry) AggregatorTypes() []string { return names(r.Aggregators, aggregatorType) }

func sourceType(s Source) string         { return s.Type }
func sinkType(s Sink) string             { return s.Type }
func aggregatorType(a Aggregator) string { return a.Type }

func find[T any](list []T, typ string, name func(T) string) (T, bool) {
	for _, c := range list {
		if name(c) == typ {
			return c, true
		}
	}
	var zero T
	return zero, false
}

// CheckSource validates the source section: a registered type, no key of another type set
// away from its default (def), then the type's own validation.
func (r *Registry) CheckSource(c, def SourceConfig, bad Bad) error {
	s, ok := r.Source(c.Type)
	if !ok {
		return bad("type", "unknown source %q (%s)", c.Type, strings.Join(r.SourceTypes(), ", "))
	}
	if err := stray(c, def, s.Keys, declared(r.Sources, sourceType, func(s Source) []Key { return s.Keys }), "source", bad); err != nil {
		return err
	}
	return validate(s.Validate, c, bad)
}

// CheckSink validates one sinks[] entry like CheckSource.
func (r *Registry) CheckSink(c SinkConfig, bad Bad) error {
	s, ok := r.Sink(c.Type)
	if !ok {
		return bad("type", "unknown sink %q (%s)", c.Type, strings.Join(r.SinkTypes(), ", "))
	}
	if err := stray(c, SinkConfig{}, s.Keys, declared(r.Sinks, sinkType, func(s Sink) []Key { return s.Keys }), "sink", bad); err != nil {
		return err
	}
	return validate(s.Validate, c, bad)
}

// CheckAggregate validates the aggregate section like CheckSource.
func (r *Registry) CheckAggregate(c, def AggregateConfig, bad Bad) error {
	a, ok := r.Aggregator(c.Type)
	if !ok {
		return bad("type", "unknown aggregation %q (%s)", c.Type, strings.Join(r.AggregatorTypes(), ", "))
	}
	if err := stray(c, def, a.Keys, declared(r.Aggregators, aggregatorType, func(a Aggregator) []Key { return a.Keys }), "aggregator", bad); err != nil {
		return err
	}
	return validate(a.Validate, c, bad)
}

func validate[C any](v func(C, Bad) error, c C, bad Bad) error {
	if v == nil {
		return nil
	}
	return v(c, bad)
}

func names[T any](list []T, name func(T) string) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = name(c)
	}
	return out
}

// declared maps each key to the types that declare it.
func declared[T any](list []T, name func(T) string, keys func(T) []Key) map[string][]string {
	m := map[string][]string{}
	for _, c := range list {
		for _, k := range keys(c) {
			m[k.Name] = append(m[k.Name], name(c))
		}
	}
	return m
}

// stray refuses the first key of section c (a struct of yaml-tagged fields) that some type
// declares, this type (own) does not, and c sets away from its default def.
func stray(c, def any, own []Key, owners map[string][]string, noun string, bad Bad) error {
	v, d := reflect.ValueOf(c), reflect.ValueOf(def)
	for i := 0; i < v.NumField(); i++ {
		key := strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0]
		types := owners[key]
		if len(types) == 0 || hasKey(own, key) || same(v.Field(i), d.Field(i)) {
			continue
		}
		if len(types) == 1 {
			return bad(key, "applies only to the %s %s", types[0], noun)
		}
		return bad(key, "applies only to the %s and %s %ss", strings.Join(types[:len(types)-1], ", "), types[len(types)-1], noun)
	}
	return nil
}

// same says whether a key's value is its default's; an empty list is the same as none.
func same(v, def reflect.Value) bool {
	if v.Kind() == reflect.Slice && v.Len() == 0 && def.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(v.Interface(), def.Interface())
}

func hasKey(keys []Key, name string) bool {
	for _, k := range keys {
		if k.Name == name {
			return true
		}
	}
	return false
}
