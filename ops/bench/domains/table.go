package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines/quality/eval"
	"github.com/reignpipe/reignpipe/pipelines/quality/retrieval"
	"github.com/reignpipe/reignpipe/pipelines/quality/tune"
)

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// perQuery reads an eval per-query-SYSTEM.tsv: query id → nDCG@k.
func perQuery(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 2 {
			return nil, fmt.Errorf("%s: short line %q", path, sc.Text())
		}
		v, err := strconv.ParseFloat(cols[1], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[cols[0]] = v
	}
	return out, sc.Err()
}

// diffCell formats REIGN − mean-pool with its interval, bold when the rule would promote.
func diffCell(d, lo, hi float64) string {
	s := fmt.Sprintf("%+.4f [%+.4f, %+.4f]", d, lo, hi)
	if lo > 0 {
		return "**" + s + "**"
	}
	return s
}

// textResult is one eval of the held-out text halves: the systems by name.
type textResult map[string]eval.SystemResult

func readEval(dir string) (textResult, error) {
	var s eval.Summary
	if err := readJSON(filepath.Join(dir, "eval-summary.json"), &s); err != nil {
		return nil, err
	}
	out := textResult{}
	for _, r := range s.Systems {
		out[r.System] = r
	}
	return out, nil
}

func (t textResult) reignCell() string {
	r, ok := t["reign"]
	if !ok || r.DiffVsMeanPool == nil {
		return "—"
	}
	return fmt.Sprintf("%.4f: %s", r.NDCG, diffCell(*r.DiffVsMeanPool, *r.CILow, *r.CIHigh))
}

// pooled is the rule on the queries of several held-out domains together.
type pooled struct{ reign, meanPool []float64 }

func (p *pooled) cell() string {
	d, lo, hi, err := retrieval.PairedBootstrapCI(p.reign, p.meanPool, retrieval.DefaultResamples, retrieval.DefaultSeed, retrieval.DefaultAlpha)
	if err != nil {
		return "no interval: " + err.Error()
	}
	return diffCell(d, lo, hi) + fmt.Sprintf(" (%d queries)", len(p.reign))
}

func table(args []string) error {
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	work := fs.String("work", "", "run.sh's work directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := *work
	var corp []corpusStats
	if err := readJSON(filepath.Join(w, "corpora", "corpora.json"), &corp); err != nil {
		return err
	}
	// Only the domains run.sh ran (DOMAINS): those whose corpus was not set aside.
	ran := corp[:0]
	for _, c := range corp {
		if _, err := os.Stat(filepath.Join(w, "corpora", c.Domain+".jsonl")); err == nil {
			ran = append(ran, c)
		}
	}
	corp = ran
	fmt.Println("### Per domain: tune on the domain's own documents (chunk-level halves, what tune decides on)")
	fmt.Println()
	fmt.Println("| domain | documents (usable: 2+ windows) | train / val / test | GN windows in tune | training (50 epochs, small-l2) | best epoch | mean-pool | REIGN tuned | REIGN − mean-pool [95% CI] | p | decision |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range corp {
		var s tune.Summary
		if err := readJSON(filepath.Join(w, "tune-"+c.Domain, "tune-summary.json"), &s); err != nil {
			return err
		}
		f := s.Figures
		if f == nil {
			fmt.Printf("| %s | %d | — | | | | | | %s | | |\n", c.Domain, c.Kept, s.Reason)
			continue
		}
		decision := "keeps the mean-pool"
		if s.Promoted {
			decision = "**promotes REIGN**"
		}
		fmt.Printf("| %s | %d (%d) | %d / %d / %d | %d | %.0f s (%.1f min per 1,000 train docs) | %d | %.4f | %.4f | %s | %.4f | %s |\n",
			c.Domain, c.Kept, s.Usable, s.Splits[tune.Train], s.Splits[tune.Val], s.Splits[tune.Test], s.GNWindows,
			s.TrainSeconds, s.TrainSeconds/60/float64(s.Splits[tune.Train])*1000, s.BestEpoch,
			f.MeanPool, f.REIGN, diffCell(f.Diff, f.CILow, f.CIHigh), f.PValue, decision)
	}

	// The general checkpoints: DOMAIN/SIZE-sSEED under lodo/.
	type run struct{ domain, name string }
	var runs []run
	names := map[string]bool{}
	for _, c := range corp {
		ents, _ := os.ReadDir(filepath.Join(w, "lodo", c.Domain))
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(w, "lodo", c.Domain, e.Name(), "tune-summary.json")); err == nil {
				runs = append(runs, run{c.Domain, e.Name()})
				names[e.Name()] = true
			}
		}
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	fmt.Println()
	fmt.Println("### General checkpoint, leave one domain out (chunk-level halves of the held-out domain's test documents)")
	fmt.Println()
	fmt.Println("| held-out domain | checkpoint (size-seed) | train docs (other domains) | training | best epoch | mean-pool | general REIGN | REIGN − mean-pool [95% CI] |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	chunkPool := map[string]*pooled{}
	for _, r := range runs {
		var s tune.Summary
		if err := readJSON(filepath.Join(w, "lodo", r.domain, r.name, "tune-summary.json"), &s); err != nil {
			return err
		}
		f := s.Figures
		if f == nil {
			continue
		}
		fmt.Printf("| %s | %s | %d | %.0f s | %d | %.4f | %.4f | %s |\n", r.domain, r.name, s.Splits[tune.Train], s.TrainSeconds, s.BestEpoch,
			f.MeanPool, f.REIGN, diffCell(f.Diff, f.CILow, f.CIHigh))
		p := chunkPool[r.name]
		if p == nil {
			p = &pooled{}
			chunkPool[r.name] = p
		}
		for _, q := range s.PerQuery {
			p.reign, p.meanPool = append(p.reign, q.REIGN), append(p.meanPool, q.MeanPool)
		}
	}

	fmt.Println()
	fmt.Println("### Text-level halves (`benchdata --kind halves`) of the same held-out documents: nDCG@10, and each system − GN mean-pool [95% CI]")
	fmt.Println()
	fmt.Println("| domain | queries / corpus | GN mean-pool | BM25 | REIGN tuned on the domain | general small-l2, seeds 1 / 2 / 3 | general base-l3, seeds 1 / 2 / 3 |")
	fmt.Println("|---|---|---|---|---|---|---|")
	textPool := map[string]*pooled{}
	var detail []string
	for _, c := range corp {
		tuned, err := readEval(filepath.Join(w, "eval-"+c.Domain+"-tuned"))
		if err != nil {
			return err
		}
		mp, bm := tuned["gn-meanpool"], tuned["bm25"]
		bmCell := fmt.Sprintf("%.4f", bm.NDCG)
		if bm.DiffVsMeanPool != nil {
			bmCell += ": " + diffCell(*bm.DiffVsMeanPool, *bm.CILow, *bm.CIHigh)
		}
		general := map[string][]string{}
		for _, n := range sorted {
			dir := filepath.Join(w, "eval-"+c.Domain+"-general-"+n)
			g, err := readEval(dir)
			if err != nil {
				continue
			}
			size := n[:strings.LastIndex(n, "-s")]
			r := g["reign"]
			if r.DiffVsMeanPool == nil {
				continue
			}
			general[size] = append(general[size], fmt.Sprintf("%+.4f", *r.DiffVsMeanPool))
			detail = append(detail, fmt.Sprintf("| %s | %s | %s |", c.Domain, n, g.reignCell()))
			rq, err1 := perQuery(filepath.Join(dir, "per-query-reign.tsv"))
			mq, err2 := perQuery(filepath.Join(dir, "per-query-gn-meanpool.tsv"))
			if err1 != nil || err2 != nil {
				return fmt.Errorf("%s: %v %v", dir, err1, err2)
			}
			p := textPool[n]
			if p == nil {
				p = &pooled{}
				textPool[n] = p
			}
			ids := make([]string, 0, len(rq))
			for id := range rq {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				if m, ok := mq[id]; ok {
					p.reign, p.meanPool = append(p.reign, rq[id]), append(p.meanPool, m)
				}
			}
		}
		cell := func(size string) string {
			if len(general[size]) == 0 {
				return "—"
			}
			return strings.Join(general[size], " / ")
		}
		fmt.Printf("| %s | %d / %d | %.4f | %s | %s | %s | %s |\n", c.Domain, mp.Queries, mp.Queries, mp.NDCG, bmCell, tuned.reignCell(),
			cell("small-l2"), cell("base-l3"))
	}
	if len(detail) > 0 {
		fmt.Println()
		fmt.Println("The general checkpoints on the text-level halves, with intervals:")
		fmt.Println()
		fmt.Println("| held-out domain | checkpoint (size-seed) | general REIGN: − mean-pool [95% CI] |")
		fmt.Println("|---|---|---|")
		for _, l := range detail {
			fmt.Println(l)
		}
	}

	fmt.Println()
	fmt.Println("### The rule for the general checkpoint: every held-out domain's queries pooled, REIGN − mean-pool [95% CI]")
	fmt.Println()
	fmt.Println("| checkpoint (size-seed) | chunk-level halves | text-level halves |")
	fmt.Println("|---|---|---|")
	for _, n := range sorted {
		c, t := "—", "—"
		if p := chunkPool[n]; p != nil {
			c = p.cell()
		}
		if p := textPool[n]; p != nil {
			t = p.cell()
		}
		fmt.Printf("| %s | %s | %s |\n", n, c, t)
	}
	return nil
}
