package vectorfile

// Config is a file sink's keys in a pipeline file (a sinks[] entry of type parquet or jsonl):
// the folder its part files go into.
type Config struct {
	Dir string `yaml:"dir" default:"—" doc:"folder of the part files (one sink per folder)"`
}

// Validate reports a missing dir through bad.
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	if c.Dir == "" {
		return bad("dir", "missing")
	}
	return nil
}

// SinkDir is the folder the sink owns (registry.DirSettings).
func (c Config) SinkDir() string { return c.Dir }
