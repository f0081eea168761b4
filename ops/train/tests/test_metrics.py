import math
import unittest

import numpy as np

from reigntrain.metrics import evaluate_split, ndcg


class MetricsTest(unittest.TestCase):
    def test_ndcg_exponential_gain_and_full_ideal(self):
        rels = {"a": 2, "b": 1, "gone": 1}  # "gone" is not retrievable but counts in the ideal
        dcg = 3 / math.log2(3) + 1 / math.log2(4)  # a at rank 2, b at rank 3
        idcg = 3 + 1 / math.log2(3) + 1 / math.log2(4)
        self.assertAlmostEqual(ndcg(["x", "a", "b"], rels, 10), dcg / idcg)
        self.assertEqual(ndcg(["a"], {"a": 0, "b": -1}, 10), 0.0)
        self.assertEqual(ndcg(["a", "a", "b"], {"a": 1}, 10), 1.0)  # a repeat earns nothing twice

    def test_ties_by_id_and_self_matches_dropped(self):
        c = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], np.float32)
        cids = ["d3", "d1", "d2", "q"]
        q = np.array([[1, 0]], np.float32)
        # d1, d3 and the query's own copy tie; the copy is dropped, d1 ranks before d3.
        got = evaluate_split(q, ["q"], c, cids, {"q": {"d3": 1}}, k=1)
        self.assertEqual(got, {"q": 0.0})
        got = evaluate_split(q, ["q"], c, cids, {"q": {"d1": 1}}, k=1)
        self.assertEqual(got, {"q": 1.0})
        got = evaluate_split(q, ["q"], c, cids, {"q": {"q": 1}}, k=1, drop_self=False)
        self.assertEqual(got, {"q": 0.0})  # "d1" < "q"
        # A query without a relevant document is skipped, not scored 0.
        self.assertEqual(evaluate_split(q, ["q"], c, cids, {"q": {"d1": 0}}, k=3), {})


if __name__ == "__main__":
    unittest.main()
