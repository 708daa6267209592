package webuitest

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// CheckPage fails t unless body is an accessible page as the pages
// promise: <html lang>, a viewport, one <h1>, one <main>, no script and
// no inline style, every visible form control labelled (a <label for>, a
// wrapping <label>, aria-label or aria-labelledby), every button with a
// text, every form posting with a csrf field, and ids unique.
func CheckPage(t testing.TB, body string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("page does not parse: %v", err)
	}
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	labels := map[string]bool{}
	ids := map[string]bool{}
	var h1, mains int
	var lang, viewport bool
	walk(doc, func(n *html.Node, inLabel bool) {
		if n.Type != html.ElementNode {
			return
		}
		if id := Attr(n, "id"); id != "" {
			if ids[id] {
				bad("id %q twice", id)
			}
			ids[id] = true
		}
		if Attr(n, "style") != "" {
			bad("inline style on <%s>", n.Data)
		}
		switch n.Data {
		case "html":
			lang = Attr(n, "lang") != ""
		case "meta":
			viewport = viewport || Attr(n, "name") == "viewport"
		case "h1":
			h1++
		case "main":
			mains++
		case "script":
			bad("a <script>")
		case "label":
			if f := Attr(n, "for"); f != "" {
				labels[f] = true
			}
		case "button":
			if strings.TrimSpace(Text(n)) == "" && Attr(n, "aria-label") == "" {
				bad("a button without a text")
			}
		case "form":
			if strings.EqualFold(Attr(n, "method"), "post") && Find(n, func(c *html.Node) bool {
				return c.Data == "input" && Attr(c, "name") == "csrf" && Attr(c, "value") != ""
			}) == nil {
				bad("form to %s without a csrf field", Attr(n, "action"))
			}
		}
	})
	// Controls: checked after every label is known.
	walk(doc, func(n *html.Node, inLabel bool) {
		if n.Type != html.ElementNode || (n.Data != "input" && n.Data != "select" && n.Data != "textarea") {
			return
		}
		if Attr(n, "type") == "hidden" || inLabel || Attr(n, "aria-label") != "" || Attr(n, "aria-labelledby") != "" {
			return
		}
		if id := Attr(n, "id"); id == "" || !labels[id] {
			bad("<%s name=%q> has no label", n.Data, Attr(n, "name"))
		}
	})
	if !lang {
		bad("<html> without lang")
	}
	if !viewport {
		bad("no viewport meta")
	}
	if h1 != 1 {
		bad("%d <h1>, want one", h1)
	}
	if mains != 1 {
		bad("%d <main>, want one", mains)
	}
	if len(problems) > 0 {
		t.Fatalf("page is not accessible: %s\n%s", strings.Join(problems, "; "), body)
	}
	return doc
}

func walk(n *html.Node, f func(*html.Node, bool)) {
	var rec func(*html.Node, bool)
	rec = func(n *html.Node, inLabel bool) {
		f(n, inLabel)
		in := inLabel || (n.Type == html.ElementNode && n.Data == "label")
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c, in)
		}
	}
	rec(n, false)
}

// Attr is n's attribute key, or "".
func Attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// Text is the text inside n.
func Text(n *html.Node) string {
	var b strings.Builder
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c)
		}
	}
	rec(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// Find is the first node under n (n included) for which match holds.
func Find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if n.Type == html.ElementNode && match(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if m := Find(c, match); m != nil {
			return m
		}
	}
	return nil
}

// FindAll is every element under n for which match holds.
func FindAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	walk(n, func(c *html.Node, _ bool) {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	})
	return out
}

// ByID is the element with id, or nil.
func ByID(n *html.Node, id string) *html.Node {
	return Find(n, func(c *html.Node) bool { return Attr(c, "id") == id })
}

// FormOf is the form around n, or nil.
func FormOf(n *html.Node) *html.Node {
	for p := n; p != nil; p = p.Parent {
		if p.Type == html.ElementNode && p.Data == "form" {
			return p
		}
	}
	return nil
}

// FormValues are the named inputs of form (hidden ones included).
func FormValues(form *html.Node) map[string]string {
	out := map[string]string{}
	for _, in := range FindAll(form, func(c *html.Node) bool { return c.Data == "input" && Attr(c, "name") != "" }) {
		out[Attr(in, "name")] = Attr(in, "value")
	}
	return out
}
