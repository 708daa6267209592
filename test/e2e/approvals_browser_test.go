package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/alpd-project/alpd/internal/testkit"
)

// chromium is Debian's Chromium (make browser installs it): ALPD_CHROMIUM,
// else /usr/bin/chromium or chromium on PATH. Without it the test is
// skipped, unless ALPD_REQUIRE_BROWSER is set (make test), when it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("ALPD_CHROMIUM"), "/usr/bin/chromium", "chromium"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("ALPD_REQUIRE_BROWSER") != "" {
		t.Fatal("no Chromium: run make browser (Debian's chromium package)")
	}
	t.Skip("no Chromium (make browser installs Debian's)")
	return ""
}

// browser is a headless Chromium with a fresh profile, closed with the
// test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		// This machine's network is closed: Chromium's own traffic only
		// slows it down and fills the log.
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1100, 1400),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// artifacts is where the screenshots go: ALPD_ARTIFACTS, else .artifacts/
// at the repository's root (git-ignored).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ALPD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".artifacts")
	}
	dir = filepath.Join(dir, "approvals")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// page runs browser actions with a time limit, failing the test with what
// the page showed.
func page(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v (at %s: %.600s)", what, err, loc, body)
	}
}

// read is one value of the page (text, a count, …).
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := read(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// decideInBrowser opens the item, clicks the decision and confirms it. A
// session older than identity.fresh_max_age is sent through a fresh
// sign-in at the IdP (max_age=0) before the confirmation page.
func decideInBrowser(t *testing.T, ctx context.Context, base, id, button string) string {
	t.Helper()
	page(t, ctx, "deciding "+id,
		chromedp.Navigate(base+"/approvals/items/"+id),
		chromedp.WaitVisible(chromedp.CSS(button)),
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Submit(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#state")),
	)
	return strings.TrimSpace(read(t, ctx, "the state", chromedp.Text(chromedp.CSS("#state"))))
}

// TestApprovalsInABrowser is issue 15's approvals page in Debian's
// Chromium: lee signs in at the test IdP (its login form), sees Muse's held
// confidential field, ana's meeting acceptance that commits her and sam's
// connection request; approves the field once (Muse then reads it),
// approves the meeting (it reaches her agents), denies sam (declined).
// Each decision goes through a fresh sign-in once the session is older
// than identity.fresh_max_age. Decisions without a fresh sign-in, with a
// missing or another session's CSRF token, from another origin, or with an
// agent's token are refused, and the item stays pending. Screenshots are
// kept under .artifacts/approvals.
func TestApprovalsInABrowser(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	const fresh = 4 * time.Second
	d := newDeliveryBroker(t, []string{"sam"}, map[string]any{"identity": map[string]any{"fresh_max_age": fresh.String()}})
	addr, base := d.addr, "http://"+d.addr
	d.ana, d.lee = signIn(t, addr, splitTenant, "ana"), signIn(t, addr, splitTenant, "lee")
	d.anaPAT = d.ana.pat(t, "alp.send", "alp.read")
	connectPeople(t, addr, d.anaPAT, "lee@"+splitTenant, d.lee)
	desk := companyAgent(t, d.ana, d.ana, "desk", "alp.read", "alp.send")
	muse := d.lee.patNamed(t, "muse", "alp.read", "alp.send")

	const videoURL = "https://video.example/q4-plan"
	meeting := `{"subject":"Q4 plan","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@` + splitTenant +
		`"],"location":{"kind":"video","url":"` + videoURL + `"}}`
	var (
		req  policyAnswer
		conf approvalItem
		err  error
	)
	testkit.Eventually(t, 30*time.Second, func() error {
		req = sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.request/v1", meeting)
		conf, err = heldFor(t, d.lee, req.EnvelopeID, "confidential_fields")
		return err
	}, "a held confidential field")
	accept := sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.accept/v1",
		`{"in_reply_to":"`+req.EnvelopeID+`","start":"2026-12-03T10:00:00Z","duration":"PT30M"}`)
	commit := d.lee.approval(t, accept.EnvelopeID)
	sam := signIn(t, addr, splitTenant, "sam").pat(t, "alp.send", "alp.read")
	samItem := d.lee.approval(t, sendTyped(t, addr, sam, "lee@"+splitTenant, "connection.request/v1", `{"purpose":"introduction"}`).EnvelopeID)

	// Lee signs in with the IdP's form.
	page(t, ctx, "signing in",
		chromedp.Navigate(base+"/approvals/"),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), "lee"),
		chromedp.SendKeys(chromedp.CSS("#password"), "lee-pw"),
		chromedp.Submit(chromedp.CSS("#password")),
		chromedp.WaitVisible(chromedp.CSS(`li[data-item-id="`+conf.ID+`"]`)),
	)
	for _, id := range []string{conf.ID, commit.ID, samItem.ID} {
		if n := read(t, ctx, "a pending row", chromedp.Evaluate[int](
			`document.querySelectorAll('li[data-item-id="`+id+`"][data-state="pending"]').length`)); n != 1 {
			t.Errorf("the pending list shows item %s %d times as pending, want once", id, n)
		}
	}
	screenshot(t, ctx, dir, "1-pending")

	page(t, ctx, "the held field's page",
		chromedp.Navigate(base+"/approvals/items/"+conf.ID),
		chromedp.WaitVisible(chromedp.CSS("#binding-code")),
	)
	code := read(t, ctx, "the binding code", chromedp.Text(chromedp.CSS("#binding-code")))
	body := read(t, ctx, "the item", chromedp.Text(chromedp.CSS("main")))
	if strings.TrimSpace(code) != conf.BindingCode || !strings.Contains(body, videoURL) || !strings.Contains(body, "confidential") ||
		!strings.Contains(body, "desk") {
		t.Errorf("the item page shows code %q (want %q) and %q", code, conf.BindingCode, body)
	}
	screenshot(t, ctx, dir, "2-held-field")

	// The sign-in is older than fresh_max_age: the decision passes
	// through a fresh sign-in first.
	time.Sleep(fresh + time.Second)
	if state := decideInBrowser(t, ctx, base, conf.ID, "#approve-once"); !strings.Contains(state, "approved once") && !strings.Contains(state, "approved_once") {
		t.Fatalf("after approving the field: %q", state)
	}
	screenshot(t, ctx, dir, "3-field-approved")
	testkit.Eventually(t, 15*time.Second, func() error {
		it := restItem(t, addr, muse, req.EnvelopeID)
		if loc, _ := it.Body["location"].(map[string]any); loc["url"] != videoURL {
			return fmt.Errorf("muse's item %+v", it.Body)
		}
		return nil
	}, "muse reading the released field")

	if state := decideInBrowser(t, ctx, base, commit.ID, "#approve-once"); !strings.Contains(state, "approved") {
		t.Fatalf("after approving the meeting: %q", state)
	}
	screenshot(t, ctx, dir, "4-meeting-approved")
	testkit.Eventually(t, 15*time.Second, func() error {
		if it := restItem(t, addr, muse, accept.EnvelopeID); it.Body["start"] != "2026-12-03T10:00:00Z" {
			return fmt.Errorf("muse's item %+v", it.Body)
		}
		return nil
	}, "the approved meeting at lee's agent")

	if state := decideInBrowser(t, ctx, base, samItem.ID, "#deny"); !strings.Contains(state, "denied") {
		t.Fatalf("after denying sam: %q", state)
	}
	screenshot(t, ctx, dir, "5-stranger-denied")
	testkit.Eventually(t, 10*time.Second, func() error {
		status, raw := d.lee.do(t, http.MethodGet, "/v1/connections", nil)
		if status != http.StatusOK || !strings.Contains(string(raw), `"declined"`) {
			return fmt.Errorf("%d %s", status, raw)
		}
		return nil
	}, "sam's request declined")

	// Refusals, on one more held field, with the browser's own session.
	other := sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.request/v1", strings.Replace(meeting, "Q4 plan", "Q1 plan", 1))
	victim := d.lee.approval(t, other.EnvelopeID)
	page(t, ctx, "the confirmation page",
		chromedp.Navigate(base+"/approvals/items/"+victim.ID+"/decide?decision=approve_once"),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	)
	csrf := read(t, ctx, "the form's CSRF token", chromedp.Value(chromedp.CSS(`input[name="csrf"]`)))
	jar, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	cookies := jar.Cookies
	post := func(tweak func(*http.Request, url.Values)) (int, string) {
		form := url.Values{"decision": {"approve_once"}, "payload_digest": {victim.PayloadDigest}, "csrf": {csrf}}
		req, _ := http.NewRequest(http.MethodPost, base+"/approvals/items/"+victim.ID+"/decide", nil)
		req.Header.Set("Origin", base)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		for _, c := range cookies {
			req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
		tweak(req, form)
		req.Body = io.NopCloser(strings.NewReader(form.Encode()))
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, problemOf(raw).Code
	}
	for _, c := range []struct {
		name   string
		tweak  func(*http.Request, url.Values)
		status int
	}{
		{"no CSRF token", func(_ *http.Request, f url.Values) { f.Del("csrf") }, http.StatusForbidden},
		{"another session's CSRF token", func(_ *http.Request, f url.Values) { f.Set("csrf", d.ana.csrf) }, http.StatusForbidden},
		{"another origin", func(r *http.Request, _ url.Values) { r.Header.Set("Origin", "http://evil.example") }, http.StatusForbidden},
		{"no origin", func(r *http.Request, _ url.Values) { r.Header.Del("Origin") }, http.StatusForbidden},
		{"an agent's token", func(r *http.Request, _ url.Values) { r.Header.Set("Authorization", "Bearer "+muse) }, http.StatusForbidden},
	} {
		if status, code := post(c.tweak); status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, status, code, c.status)
		}
	}
	time.Sleep(fresh + time.Second)
	if status, code := post(func(*http.Request, url.Values) {}); status != http.StatusUnauthorized || code != "fresh_signin_required" {
		t.Errorf("a decision without a fresh sign-in: %d %s", status, code)
	}
	if it := d.lee.approvalItem(t, victim.ID); it.State != "pending" {
		t.Errorf("after the refusals the item is %s", it.State)
	}
	screenshot(t, ctx, dir, "6-confirm-page")
}
