// Package registry holds the types of the component registry: a source, sink or aggregator type
// declares here its type name, its doc, the configuration it reads and its constructor, in one
// place. The built-in components are in package pipelines/components; the loader (package
// pipelines) checks and decodes a definition's component sections against them, and the
// runners open components through them.
//
// A type's own keys are the fields of its settings struct (Config): their YAML names, defaults
// and one-line docs are the fields' yaml, default and doc tags, and the struct's Validate method
// (Validator) holds their rules. The struct is the component's -- pgvector.Config lives with the
// pgvector sink -- so adding a key is one field in one place: the loader's shape check, its
// messages, `reignpipe components` and the README's key table check all read it from there.
package registry

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/gn"
)

// Key is one configuration key of a component, relative to its section ("sections" for
// source.sections), as its settings struct's tags declare it.
type Key struct {
	Name    string
	Default string // as the README's key table writes it
	Doc     string // one line
}

// Bad reports a bad value of key (relative to the section) with its YAML line. It is a plain
// function type, so that a component's settings can take one without importing this package.
type Bad = func(key, format string, args ...any) error

// Validator is implemented by settings that check their own values: Validate reports the first
// bad one through bad. The loader passes a bad that says the YAML path and line; a connector's
// constructor checks its options with the same method, so there is one rule and one message.
type Validator interface {
	Validate(bad Bad) error
}

// Source is a source type (source.type).
type Source struct {
	Type string
	Doc  string
	// Config returns the type's settings with their defaults: a pointer to a struct of
	// yaml-tagged fields (the keys beyond the ones every source reads, SourceConfig's), each
	// with a default and a doc tag. nil: the type has no keys of its own.
	Config func() any
	Open   func(c SourceConfig) (connectors.Source, error)
}

// Sink is a sink type (sinks[].type).
type Sink struct {
	Type   string
	Doc    string
	Config func() any // as Source.Config
	// Open opens the sink; ctx bounds what opening waits for (a database that is down), so a
	// signal stops a run that is still connecting.
	Open func(ctx context.Context, c SinkConfig, env SinkEnv) (connectors.Sink, error)
	// Output names where the sink writes, for the run summary.
	Output func(c SinkConfig) string
	// Transport is the transport.type the sink needs ("" = any): where its connection
	// settings live.
	Transport string
	// Store, for a sink whose vectors can be searched, opens the store that answers from what
	// it wrote (search, serve); nil for one that cannot (a topic). Indexed says its store
	// answers from an index rather than a scan: search asks such a sink first.
	Store   func(ctx context.Context, c SinkConfig) (connectors.VectorStore, error)
	Indexed bool
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
	// DeleteRetention is run.delete_retention: how long a sink that remembers deletions (a
	// database's deletions table) keeps them against older upserts.
	DeleteRetention time.Duration
}

// Aggregator is an aggregation type (aggregate.type).
type Aggregator struct {
	Type   string
	Doc    string
	Config func() any // as Source.Config
	Build  func(env AggregatorEnv) (Built, error)
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
}

// Keys are the type's own keys (its settings' fields), in declaration order.
func (s Source) Keys() []Key { return keysOf(s.Config) }

// Keys are the type's own keys, as Source.Keys.
func (s Sink) Keys() []Key { return keysOf(s.Config) }

// Keys are the type's own keys, as Source.Keys.
func (a Aggregator) Keys() []Key { return keysOf(a.Config) }

// Settings is c's settings, or the type's defaults when c carries none (a section built in
// code rather than decoded).
func (s Source) Settings(c SourceConfig) any { return settings(c.Settings, s.Config) }

// Settings is c's settings, as Source.Settings.
func (s Sink) Settings(c SinkConfig) any { return settings(c.Settings, s.Config) }

// Settings is c's settings, as Source.Settings.
func (a Aggregator) Settings(c AggregateConfig) any { return settings(c.Settings, a.Config) }

func settings(have any, config func() any) any {
	if have != nil || config == nil {
		return have
	}
	return config()
}

// SourceKeys are the keys every source type reads (SourceConfig's, but type).
func (r *Registry) SourceKeys() []Key {
	return slices.DeleteFunc(KeysOf(SourceConfig{}), func(k Key) bool { return k.Name == "type" })
}

// Validate checks the registry itself: every type named once and with its constructor, and
// every type's settings a struct whose keys are documented, do not shadow a key of the
// section, and whose default tags say the defaults Config gives.
func (r *Registry) Validate() error {
	seen := map[string]bool{}
	check := func(role, typ string, ok bool, config func() any, common any) error {
		if typ == "" || seen[role+" "+typ] || !ok {
			return fmt.Errorf("%s %q: registered twice, unnamed or without a constructor", role, typ)
		}
		seen[role+" "+typ] = true
		if err := checkSettings(config, common); err != nil {
			return fmt.Errorf("%s %q: %w", role, typ, err)
		}
		return nil
	}
	for _, s := range r.Sources {
		if err := check("source", s.Type, s.Open != nil, s.Config, SourceConfig{}); err != nil {
			return err
		}
	}
	for _, s := range r.Sinks {
		if err := check("sink", s.Type, s.Open != nil && s.Output != nil, s.Config, SinkConfig{}); err != nil {
			return err
		}
	}
	for _, a := range r.Aggregators {
		if err := check("aggregator", a.Type, a.Build != nil, a.Config, AggregateConfig{}); err != nil {
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

func names[T any](list []T, name func(T) string) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = name(c)
	}
	return out
}

// CheckSource validates the source section: a registered type, then the type's settings
// (their Validate). Which keys the section may hold is the loader's shape check: a key of
// another type is never decoded into these settings.
func (r *Registry) CheckSource(c SourceConfig, bad Bad) error {
	s, ok := r.Source(c.Type)
	if !ok {
		return bad("type", "unknown source %q (%s)", c.Type, strings.Join(r.SourceTypes(), ", "))
	}
	return validate(c.Settings, s.Config, bad)
}

// CheckSink validates one sinks[] entry like CheckSource.
func (r *Registry) CheckSink(c SinkConfig, bad Bad) error {
	s, ok := r.Sink(c.Type)
	if !ok {
		return bad("type", "unknown sink %q (%s)", c.Type, strings.Join(r.SinkTypes(), ", "))
	}
	return validate(c.Settings, s.Config, bad)
}

// CheckAggregate validates the aggregate section like CheckSource.
func (r *Registry) CheckAggregate(c AggregateConfig, bad Bad) error {
	a, ok := r.Aggregator(c.Type)
	if !ok {
		return bad("type", "unknown aggregation %q (%s)", c.Type, strings.Join(r.AggregatorTypes(), ", "))
	}
	return validate(c.Settings, a.Config, bad)
}

// validate runs the settings' Validate (the type's defaults' when there are none). Settings of
// another type -- a section whose type was changed in code and its settings not -- are a
// mistake of that code, said as such rather than checked by the wrong rules.
func validate(have any, config func() any, bad Bad) error {
	s := settings(have, config)
	if s != nil && (config == nil || reflect.TypeOf(s) != reflect.TypeOf(config())) {
		return fmt.Errorf("the section holds settings of another type (%T)", s)
	}
	if v, ok := s.(Validator); ok {
		return v.Validate(bad)
	}
	return nil
}

// KeysOf lists the keys of a settings struct (or a pointer to one): its yaml-tagged fields,
// inline structs' included, in declaration order, with their default and doc tags.
func KeysOf(settings any) []Key {
	t := reflect.TypeOf(settings)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var keys []Key
	for _, f := range Fields(t) {
		keys = append(keys, Key{Name: f.Name, Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc")})
	}
	return keys
}

func keysOf(config func() any) []Key {
	if config == nil {
		return nil
	}
	return KeysOf(config())
}

// Field is one key of a settings struct: its YAML name and the struct field behind it.
type Field struct {
	Name string
	reflect.StructField
}

// Fields lists the YAML keys of struct type t in declaration order, the fields of inline
// structs in their place; fields tagged "-" and unexported ones are not keys.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || tag[0] == "-" {
			continue
		}
		if slices.Contains(tag[1:], "inline") {
			for _, in := range Fields(f.Type) {
				in.Index = append([]int{i}, in.Index...) // from t, for FieldByIndex
				out = append(out, in)
			}
			continue
		}
		name := tag[0]
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, Field{Name: name, StructField: f})
	}
	return out
}

// checkSettings checks a type's settings: a pointer to a struct, with a Validate of its own if
// a struct it inlines has one (two inlined Validates do not promote, and would go uncalled),
// each key documented and with a default, none a key the section already has (common), none
// twice, and each default tag, where Config gives a value, saying that value.
func checkSettings(config func() any, common any) error {
	if config == nil {
		return nil
	}
	v := reflect.ValueOf(config())
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("Config returns %T, not a pointer to a struct", config())
	}
	if _, ok := config().(Validator); !ok {
		for i := 0; i < v.Elem().NumField(); i++ {
			f := v.Elem().Type().Field(i)
			if strings.Contains(f.Tag.Get("yaml"), ",inline") && reflect.PointerTo(f.Type).Implements(reflect.TypeOf((*Validator)(nil)).Elem()) {
				return fmt.Errorf("the settings inline %s, which has a Validate, but have none themselves to call it", f.Type.Name())
			}
		}
	}
	taken := map[string]bool{}
	for _, f := range Fields(reflect.TypeOf(common)) {
		taken[f.Name] = true
	}
	for _, f := range Fields(v.Elem().Type()) {
		switch {
		case taken[f.Name]:
			return fmt.Errorf("key %s is declared twice (or is a key every type of the section reads)", f.Name)
		case f.Tag.Get("doc") == "" || f.Tag.Get("default") == "":
			return fmt.Errorf("key %s has no doc or default tag", f.Name)
		}
		taken[f.Name] = true
		val := v.Elem().FieldByIndex(f.Index)
		if val.IsZero() {
			continue // a default described in words ("all cores") or applied where it is used
		}
		said := reflect.New(val.Type())
		if err := yaml.Unmarshal([]byte(f.Tag.Get("default")), said.Interface()); err != nil || !reflect.DeepEqual(said.Elem().Interface(), val.Interface()) {
			return fmt.Errorf("key %s: the default tag says %q, Config gives %v", f.Name, f.Tag.Get("default"), val.Interface())
		}
	}
	return nil
}
