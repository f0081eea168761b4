import importlib.util
import json
import os
import tempfile
import unittest

import numpy as np
import torch

from reigntrain.model import REIGN, SIZES, count_parameters, save_checkpoint

ORACLE = os.path.join(os.path.dirname(__file__), "..", "..", "oracles", "reign_reference.py")


def load_oracle():
    spec = importlib.util.spec_from_file_location("reign_reference", ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ModelTest(unittest.TestCase):
    def test_parameter_counts_match_the_paper(self):
        # REFERENCE section 3 / paper Table 7, each with the GN dim the paper pairs it with.
        want = {"tiny-l1": (556608, "0.56"), "small-l2": (3845376, "3.85"),
                "base-l3": (22446336, "22.45"), "large-l4": (52486144, "52.49")}
        for size, (exact, paper) in want.items():
            n = count_parameters(REIGN(size, SIZES[size][4]))
            self.assertEqual(n, exact, size)
            self.assertEqual(f"{n / 1e6:.2f}", paper, size)

    def test_state_dict_is_the_reference_layout(self):
        oracle = load_oracle()
        with tempfile.TemporaryDirectory() as d:
            oracle.make("small-l2", 1, d, 384)
            ref = oracle.read_safetensors(os.path.join(d, "model.safetensors"))
        sd = REIGN("small-l2", 384).state_dict()
        self.assertEqual(sorted(sd), sorted(ref))
        for name, t in sd.items():
            self.assertEqual(list(t.shape), list(ref[name].shape), name)

    def test_matches_the_numpy_reference_with_padding(self):
        oracle = load_oracle()
        torch.manual_seed(3)
        model = REIGN("tiny-l1", 16)
        with torch.no_grad():  # move away from BERT's init so LayerNorm and biases matter
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.eval()
        rng = np.random.default_rng(5)
        docs = [rng.normal(size=(n, 16)).astype(np.float32) for n in (1, 3, 6)]
        batch = np.zeros((3, 6, 16), np.float32)
        mask = np.zeros((3, 6), np.float32)
        for i, d in enumerate(docs):
            batch[i, :len(d)] = d
            mask[i, :len(d)] = 1
        with torch.no_grad():
            got = model(torch.from_numpy(batch), torch.from_numpy(mask)).numpy()
        with tempfile.TemporaryDirectory() as d:
            save_checkpoint(model, os.path.join(d, "ck"), 512, 512, {"gn_fingerprint": "x", "gn_dim": 16, "k": 512, "s": 512})
            with open(os.path.join(d, "ck", "config.json")) as f:
                cfg = json.load(f)
            t = oracle.read_safetensors(os.path.join(d, "ck", "model.safetensors"))
        self.assertEqual(cfg["model_type"], "reign")
        self.assertEqual(cfg["gn_projection_dim"], 16)
        for i, doc in enumerate(docs):
            want = oracle.encode(t, cfg, doc.astype(np.float64))
            np.testing.assert_allclose(got[i], want, atol=2e-6, err_msg=f"document of {len(doc)} chunks")

    def test_dropout_only_in_training(self):
        torch.manual_seed(0)
        model = REIGN("tiny-l1", 8)
        x, m = torch.randn(2, 4, 8), torch.ones(2, 4)
        model.eval()
        self.assertTrue(torch.equal(model(x, m), model(x, m)))
        model.train()
        self.assertFalse(torch.equal(model(x, m), model(x, m)))

    def test_rejects_bad_sizes(self):
        with self.assertRaises(ValueError):
            REIGN("huge-l9", 384)
        with self.assertRaises(ValueError):
            REIGN("tiny-l1", 0)


if __name__ == "__main__":
    unittest.main()
