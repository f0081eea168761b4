package uspto

// Config is a uspto source's own text keys in a pipeline file.
type Config struct {
	// Sections picks and orders the parts of a patent's text; nil = DefaultSections.
	Sections []string `yaml:"sections" default:"all" doc:"which parts make the text, in order: title, abstract, claims, description"`
}

// Validate reports a bad section list through bad.
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	if c.Sections != nil && len(c.Sections) == 0 {
		return bad("sections", "is empty: leave it out for all of title, abstract, claims, description")
	}
	if err := ValidateSections(c.Sections); err != nil {
		return bad("sections", "%v", err)
	}
	return nil
}
