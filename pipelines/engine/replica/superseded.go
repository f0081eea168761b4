package replica

// Superseded asks the local replica of the store whether a deletion it remembers supersedes
// version of docID (engine.Cache).
func (p *Publisher) Superseded(docID, version string) (bool, error) {
	return p.cache.Superseded(docID, version)
}
