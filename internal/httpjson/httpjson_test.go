package httpjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	httpjson.Write(rec, http.StatusCreated, map[string]string{"url": "https://a.example/?x=1&y=<2>"})
	h := rec.Header()
	if rec.Code != http.StatusCreated || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" ||
		h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Pragma") != "no-cache" {
		t.Errorf("%d %v", rec.Code, h)
	}
	if got := rec.Body.String(); got != `{"url":"https://a.example/?x=1&y=<2>"}`+"\n" {
		t.Errorf("body %q", got)
	}
}

func TestWriteUnencodable(t *testing.T) {
	rec := httptest.NewRecorder()
	httpjson.Write(rec, http.StatusOK, map[string]any{"f": func() {}})
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != httpjson.MediaProblem ||
		!strings.Contains(rec.Body.String(), `"code":"internal_error"`) {
		t.Errorf("%d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

func TestWritePublic(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		rec := httptest.NewRecorder()
		httpjson.WritePublic(rec, httptest.NewRequest(method, "/", nil), map[string]int{"a": 1}, 5*time.Minute)
		h := rec.Header()
		if rec.Code != 200 || h.Get("Cache-Control") != "public, max-age=300" || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %v", method, rec.Code, h)
		}
		if want := map[string]string{http.MethodGet: "{\"a\":1}\n", http.MethodHead: ""}[method]; rec.Body.String() != want {
			t.Errorf("%s: body %q", method, rec.Body)
		}
	}
}

func TestWriteError(t *testing.T) {
	e := &httpjson.Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "slow down", RetryAfter: 7,
		Challenge: `Bearer realm="x"`, Cause: errors.New("the secret cause")}
	rec := httptest.NewRecorder()
	httpjson.WriteError(rec, fmt.Errorf("wrapped: %w", e))
	h := rec.Header()
	if rec.Code != 429 || h.Get("Content-Type") != "application/problem+json" || h.Get("Retry-After") != "7" ||
		h.Get("WWW-Authenticate") != `Bearer realm="x"` || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%d %v", rec.Code, h)
	}
	if strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("the cause was sent: %s", rec.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"title": "Too Many Requests", "status": 429.0, "detail": "slow down", "code": "rate_limited", "retry_after": 7.0,
		"error": map[string]any{"status": 429.0, "code": "rate_limited", "message": "slow down", "retry_after": 7.0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("problem %v, want %v", got, want)
	}
}

func TestWriteErrorHidesOtherErrors(t *testing.T) {
	rec := httptest.NewRecorder()
	httpjson.WriteError(rec, errors.New("db password is hunter2"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "hunter2") || !strings.Contains(rec.Body.String(), `"code":"internal_error"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	// A status that is no error becomes 500.
	rec = httptest.NewRecorder()
	httpjson.WriteError(rec, &httpjson.Error{Status: 200, Code: "odd", Message: "m"})
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"status":500`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

// A refusal with several problems sends them all, each with its own code
// and position, as the "problems" member.
func TestWriteErrorProblems(t *testing.T) {
	type at struct {
		Code   string `json:"code"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
	}
	rec := httptest.NewRecorder()
	httpjson.WriteError(rec, &httpjson.Error{Status: 422, Code: "cedar_parse", Message: "2 problems",
		Problems: []at{{"cedar_parse", 3, 7}, {"missing_id", 9, 1}}})
	var got struct {
		Code     string `json:"code"`
		Problems []at   `json:"problems"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 422 || got.Code != "cedar_parse" || len(got.Problems) != 2 || got.Problems[1] != (at{"missing_id", 9, 1}) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	// Without problems the member is left out.
	rec = httptest.NewRecorder()
	httpjson.WriteError(rec, &httpjson.Error{Status: 400, Code: "bad", Message: "m"})
	if strings.Contains(rec.Body.String(), "problems") {
		t.Errorf("an empty problems member was sent: %s", rec.Body)
	}
}
