package reign

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ManifestFile sits beside config.json and model.safetensors in every checkpoint reignpipe
// produces or accepts. The reference layout does not record which GN a checkpoint was trained
// on (only its name hints at it), and a REIGN model fed chunk embeddings from another GN, or
// another window setting, returns confident nonsense: the manifest makes that an error.
const ManifestFile = "reignpipe-manifest.json"

// Manifest records the chunk-embedding space a checkpoint was trained in.
type Manifest struct {
	GNName        string `json:"gn_name,omitempty"`
	GNFingerprint string `json:"gn_fingerprint"`
	GNDim         int    `json:"gn_dim"`
	K             int    `json:"k"`
	S             int    `json:"s"`
}

// ReadManifest returns the checkpoint's manifest; ok is false when the directory has none.
func ReadManifest(dir string) (m Manifest, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, false, fmt.Errorf("reign: %s in %s: %w", ManifestFile, dir, err)
	}
	if m.GNFingerprint == "" || m.GNDim <= 0 || m.K <= 0 || m.S <= 0 {
		return m, false, fmt.Errorf("reign: %s in %s lacks gn_fingerprint, gn_dim, k or s", ManifestFile, dir)
	}
	return m, true, nil
}

// WriteManifest writes the manifest into a checkpoint directory.
func WriteManifest(dir string, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestFile), append(data, '\n'), 0o644)
}

// Space is the chunk-embedding space a pipeline feeds the stage.
type Space struct {
	GNName, GNFingerprint string
	GNDim, K, S           int
}

// CheckSpace refuses to pair a checkpoint with chunk embeddings from another GN, dimension or
// window setting. A checkpoint without a manifest is accepted only when the user names the GN
// it was trained on (trainedOn: a GN name or fingerprint) and that is the GN in use.
func CheckSpace(dir string, ck *Checkpoint, in Space, trainedOn string) error {
	if ck.GNDim != in.GNDim {
		return fmt.Errorf("reign: checkpoint %s takes %d-dimensional chunk embeddings, the GN %s gives %d",
			dir, ck.GNDim, in.GNName, in.GNDim)
	}
	m, ok, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	if !ok {
		if trainedOn == "" {
			return fmt.Errorf("reign: checkpoint %s has no %s, so the GN it was trained on is unknown; "+
				"name it (aggregate.trained_on: %s) if you know it was trained on that GN's chunk embeddings", dir, ManifestFile, in.GNName)
		}
		if trainedOn != in.GNName && trainedOn != in.GNFingerprint {
			return fmt.Errorf("reign: checkpoint %s was trained on %q, but this pipeline's GN is %s (%s)",
				dir, trainedOn, in.GNName, in.GNFingerprint)
		}
		return nil
	}
	switch {
	case m.GNFingerprint != in.GNFingerprint:
		return fmt.Errorf("reign: checkpoint %s was trained on GN %s (fingerprint %s), this pipeline's GN is %s (fingerprint %s): mixing GN spaces is refused",
			dir, m.GNName, m.GNFingerprint, in.GNName, in.GNFingerprint)
	case m.K != in.K || m.S != in.S:
		return fmt.Errorf("reign: checkpoint %s was trained on windows K=%d S=%d, this pipeline cuts K=%d S=%d",
			dir, m.K, m.S, in.K, in.S)
	case m.GNDim != ck.GNDim:
		return fmt.Errorf("reign: %s in %s says gn_dim %d, the weights take %d", ManifestFile, dir, m.GNDim, ck.GNDim)
	}
	return nil
}
