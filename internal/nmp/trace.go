package nmp

import (
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// AppendTrace appends e to h's trace and adds e's tokens to the running
// total, saturating. The total is the budget's, so a header without a budget
// gets one when e spent tokens: otherwise the spending would be recorded in
// the trace but lost from the total the halt rule reads. h must not be nil.
//
// Check Halted on h.Budget after this call: the rule is evaluated after the
// current hop's tokens are counted.
func AppendTrace(h *nmpv1.NmpHeader, e *nmpv1.TraceEntry) {
	h.Trace = append(h.Trace, e)
	if e.GetTokens() == 0 {
		return
	}
	if h.Budget == nil {
		h.Budget = &nmpv1.Budget{}
	}
	h.Budget.TokensUsed = AddTokens(h.Budget.TokensUsed, e.GetTokens())
}
