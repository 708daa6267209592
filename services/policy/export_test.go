package policy

// NoticeID is the id of the connection.accept/v1 envelope that answers
// request envelope of connection conn of tenant (tests find it by it).
func NoticeID(tenant, conn, request string) string { return noticeID(tenant, conn, request) }
