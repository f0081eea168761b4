import contextlib
import io
import json
import os
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_torch

from reigntrain import data as D
from reigntrain.model import REIGN
from reigntrain.train import main
from tests.fixtures import make_dataset, meta, write_shard


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def jsonl(path):
    return [json.loads(line) for line in read(path).splitlines()]


def train(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


class TrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.shards, self.seq, self.data = make_dataset(self.root)

    def tearDown(self):
        self.tmp.cleanup()

    def args(self, out, *extra):
        return ["--shards", self.shards, "--sequences", self.seq, "--data", self.data, "--out", out,
                "--size", "tiny-l1", "--epochs", "3", "--batch-size", "4", "--lr", "1e-3",
                "--device", "cpu", "--gn-name", "test-gn", *extra]

    def test_outputs_and_determinism(self):
        runs = {}
        for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
            out = os.path.join(self.root, name)
            rc, stdout, stderr = train(self.args(out, "--seed", seed))
            self.assertEqual(rc, 0, stderr)
            self.assertIn("device cpu", stdout)
            runs[name] = out
        a = runs["a"]
        for ck in ("best", "last"):
            self.assertEqual(sorted(os.listdir(os.path.join(a, ck))),
                             ["config.json", "model.safetensors", "reignpipe-manifest.json"])
        man = json.loads(read(os.path.join(a, "best", "reignpipe-manifest.json")))
        self.assertEqual(man, {"gn_name": "test-gn", "gn_fingerprint": "fp-test", "gn_dim": 8, "k": 32, "s": 32})
        cfg = json.loads(read(os.path.join(a, "best", "config.json")))
        self.assertEqual((cfg["model_type"], cfg["num_hidden_layers"], cfg["hidden_size"], cfg["gn_projection_dim"]),
                         ("reign", 1, 192, 8))
        w = load_file(os.path.join(a, "last", "model.safetensors"))
        self.assertEqual(w["embeddings.gn_projection.weight"].shape, (192, 8))  # [out, in]
        self.assertTrue(all(t.dtype == np.float32 for t in w.values()))
        log = jsonl(os.path.join(a, "train-log.jsonl"))
        self.assertEqual([r["epoch"] for r in log], [1, 2, 3])
        self.assertTrue(all(r["examples"] == 6 and r["val_ndcg@10"] is not None and r["examples_per_s"] > 0 for r in log))
        rep = json.loads(read(os.path.join(a, "eval-trainer.json")))
        self.assertEqual(sorted(rep["splits"]), ["test", "val"])
        self.assertEqual(sorted(rep["splits"]["val"]["per_query"]), ["q6", "q7", "q8"])
        best = max(log, key=lambda r: r["val_ndcg@10"])
        self.assertEqual(rep["best_epoch"], min(r["epoch"] for r in log if r["val_ndcg@10"] == best["val_ndcg@10"]))
        self.assertAlmostEqual(rep["splits"]["val"]["ndcg@10"], best["val_ndcg@10"], places=12)

        for f in ("last/model.safetensors", "best/model.safetensors", "eval-trainer.json"):
            self.assertEqual(read(os.path.join(a, f), "rb"), read(os.path.join(runs["b"], f), "rb"), f)
        other = load_file(os.path.join(runs["c"], "last", "model.safetensors"))
        self.assertFalse(np.array_equal(other["pooler.dense.weight"], w["pooler.dense.weight"]))

    def test_training_learns(self):
        shards, seq, data = make_dataset(os.path.join(self.root, "big"), n_docs=40)
        out = os.path.join(self.root, "long")
        args = ["--shards", shards, "--sequences", seq, "--data", data, "--out", out, "--size", "tiny-l1",
                "--epochs", "20", "--batch-size", "10", "--lr", "1e-3", "--device", "cpu", "--val-every", "5"]
        rc, _, stderr = train(args)
        self.assertEqual(rc, 0, stderr)
        log = jsonl(os.path.join(out, "train-log.jsonl"))
        self.assertEqual([r["val_ndcg@10"] is not None for r in log], [(e % 5 == 0) for e in range(1, 21)])
        first, last = sum(r["loss"] for r in log[:3]) / 3, sum(r["loss"] for r in log[-3:]) / 3
        self.assertLess(last, first)
        # The trained encoder separates train anchors from their positives better than its
        # initialisation (the same seed builds the same initial weights).
        store = D.ChunkStore(seq, shards)
        n = 20
        seqs = [store.rows[("q", f"q{i}")] for i in range(n)] + [store.rows[("c", f"c{i}")] for i in range(n)]
        index, mask = D.pad_rows(seqs)
        table = torch.from_numpy(store.table)

        def margin(model):
            model.eval()
            with torch.no_grad():
                v = model(table[torch.from_numpy(index)], torch.from_numpy(mask))
            sim = (v[:n] @ v[n:].T).numpy()
            return sim.diagonal().mean() - sim[~np.eye(n, dtype=bool)].mean()

        torch.manual_seed(42)
        init = REIGN("tiny-l1", 8)
        trained = REIGN("tiny-l1", 8)
        trained.load_state_dict(load_torch(os.path.join(out, "last", "model.safetensors")))
        self.assertGreater(margin(trained), margin(init))

    def test_infonce_and_self_supervised(self):
        rc, _, stderr = train(self.args(os.path.join(self.root, "nce"), "--loss", "infonce", "--tau", "0.07"))
        self.assertEqual(rc, 0, stderr)
        # Unlabelled: no --data; documents of 2+ chunks give crop pairs, a held-out one validates.
        out = os.path.join(self.root, "ss")
        args = self.args(out, "--self-supervised", "--holdout", "0.2")
        i = args.index("--data")
        del args[i:i + 2]
        rc, stdout, stderr = train(args)
        self.assertEqual(rc, 0, stderr)
        self.assertIn("self-supervised on 7 multi-chunk documents", stdout)
        rep = json.loads(read(os.path.join(out, "eval-trainer.json")))
        self.assertEqual(list(rep["splits"]), ["selfsup-val"])
        self.assertEqual(rep["splits"]["selfsup-val"]["queries"], 2)

    def test_refuses_bad_inputs(self):
        rc, _, err = train(self.args(os.path.join(self.root, "x"), "--expect-fingerprint", "other"))
        self.assertEqual(rc, 1)
        self.assertIn("expected other", err)
        # A shard of another GN space in the same directory.
        write_shard(os.path.join(self.shards, "shard-00000003.parquet"), [1], np.ones((1, 8), np.float32),
                    meta("fp-other", dim=8))
        rc, _, err = train(self.args(os.path.join(self.root, "y")))
        self.assertEqual(rc, 1)
        self.assertIn("one cache, one GN space", err)
        os.remove(os.path.join(self.shards, "shard-00000003.parquet"))
        # A window the index names but no shard holds.
        os.remove(os.path.join(self.shards, "shard-00000002.parquet"))
        rc, _, err = train(self.args(os.path.join(self.root, "z")))
        self.assertEqual(rc, 1)
        self.assertIn("is in no shard", err)

    def test_rejects_bad_flags(self):
        for extra in (["--epochs", "0"], ["--lam", "2"], ["--size", "huge"]):
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                main(self.args(os.path.join(self.root, "f"), *extra))


if __name__ == "__main__":
    unittest.main()
