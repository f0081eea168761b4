package wikipedia

// Config is a wikipedia source's own keys in a pipeline file (besides path, name and
// max_doc_bytes, which every source reads).
type Config struct {
	Index   string `yaml:"index" default:"auto" doc:"multistream index (*-index.txt.bz2 beside the dump)"`
	Workers int    `yaml:"workers" default:"all cores" doc:"parallel bz2 streams"`
	// DeleteMissing is Options.DeleteMissing; the runner keeps the article set in
	// run.state_dir.
	DeleteMissing bool `yaml:"delete_missing" default:"false" doc:"once a dump is read whole, delete downstream the articles of the last complete read it no longer has (set kept in run.state_dir)"`
}

// Validate reports a bad value through bad.
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	if c.Workers < 0 {
		return bad("workers", "must be >= 0")
	}
	return nil
}
