package dlp

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/services/policy/freetext"
)

type testCase struct {
	Name     string     `json:"name"`
	Detector Detector   `json:"detector"`
	Kind     string     `json:"kind"`
	Text     string     `json:"text"`
	Want     []Detector `json:"want"`
	Spans    []string   `json:"spans"`
}

func loadCases(t testing.TB) []testCase {
	t.Helper()
	f, err := os.Open("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var file struct {
		About string     `json:"about"`
		Cases []testCase `json:"cases"`
	}
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("testdata/cases.json: %v", err)
	}
	return file.Cases
}

func TestCases(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			n := freetext.Normalize(c.Text)
			fs := Scan(n)
			got := make([]Detector, len(fs))
			for i, f := range fs {
				got[i] = f.Detector
				if f.Severity != SeverityOf(f.Detector) {
					t.Errorf("%v: severity %s, want %s", f, f.Severity, SeverityOf(f.Detector))
				}
				if v := n.Text()[f.Start:f.End]; strings.Contains(f.String(), v) {
					t.Errorf("String() %q contains the value", f.String())
				}
			}
			if !slices.Equal(got, c.Want) && !(len(got) == 0 && len(c.Want) == 0) {
				t.Fatalf("Scan(%q) = %v, want %v", n.Text(), fs, c.Want)
			}
			if c.Spans != nil {
				if len(c.Spans) != len(fs) {
					t.Fatalf("%d findings, %d spans", len(fs), len(c.Spans))
				}
				for i, f := range fs {
					if got := n.Text()[f.Start:f.End]; got != c.Spans[i] {
						t.Errorf("finding %d spans %q, want %q", i, got, c.Spans[i])
					}
				}
			}
			if c.Kind == "near_miss" && slices.Contains(got, c.Detector) {
				t.Errorf("near miss of %s found it", c.Detector)
			}
		})
	}
}

// TestCoverage holds the testdata to its promise: every detector has a true
// positive and a near miss, and every case names a known detector and kind.
func TestCoverage(t *testing.T) {
	tp, nm := map[Detector]bool{}, map[Detector]bool{}
	known := map[Detector]bool{"": true}
	for _, d := range Detectors() {
		known[d] = true
	}
	for _, c := range loadCases(t) {
		if !known[c.Detector] {
			t.Errorf("case %q: unknown detector %q", c.Name, c.Detector)
		}
		switch c.Kind {
		case "true_positive":
			tp[c.Detector] = true
			if !slices.Contains(c.Want, c.Detector) {
				t.Errorf("true positive %q does not expect %s", c.Name, c.Detector)
			}
		case "near_miss":
			nm[c.Detector] = true
		case "evasion", "mixed", "clean":
		default:
			t.Errorf("case %q: unknown kind %q", c.Name, c.Kind)
		}
	}
	for _, d := range Detectors() {
		if !tp[d] || !nm[d] {
			t.Errorf("detector %s: true positive %v, near miss %v", d, tp[d], nm[d])
		}
		if SeverityOf(d) == "" {
			t.Errorf("detector %s has no severity", d)
		}
	}
}

// TestDocumented keeps docs/policy.md's detector section complete.
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile("../../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range Detectors() {
		if !strings.Contains(string(b), "`"+string(d)+"`") {
			t.Errorf("docs/policy.md does not describe %s", d)
		}
	}
	if !strings.Contains(string(b), "3.0 bits") {
		t.Error("docs/policy.md does not state the entropy threshold")
	}
}

func TestFindingString(t *testing.T) {
	f := Finding{Detector: PaymentCard, Severity: Block, Start: 3, End: 22}
	if got, want := f.String(), "payment_card (block) at bytes 3-22"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	b, _ := json.Marshal(f)
	if got, want := string(b), `{"detector":"payment_card","severity":"block","start":3,"end":22}`; got != want {
		t.Fatalf("JSON = %s, want %s", got, want)
	}
}

func FuzzScan(f *testing.F) {
	for _, c := range loadCases(f) {
		f.Add(c.Text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := freetext.Normalize(s)
		text := n.Text()
		prev := -1
		for _, fd := range Scan(n) {
			if fd.Start < 0 || fd.End > len(text) || fd.Start >= fd.End {
				t.Fatalf("%v outside [0,%d)", fd, len(text))
			}
			if fd.Start < prev {
				t.Fatalf("findings out of order at %v", fd)
			}
			prev = fd.Start
			if !isBoundary(text, fd.Start) || !isBoundary(text, fd.End) {
				t.Fatalf("%v splits a character", fd)
			}
			if strings.Contains(fd.String(), text[fd.Start:fd.End]) {
				t.Fatalf("String() %q contains the value %q", fd.String(), text[fd.Start:fd.End])
			}
		}
	})
}

func isBoundary(s string, i int) bool {
	return i == len(s) || (s[i]&0xC0) != 0x80
}
