import Testing
import APNSWire
@testable import GatewayClient

/// Every row of issue 15's outcome table, from the answer as it comes.
@Suite struct H2AnswerTests {
    func verdict(_ status: Int, _ body: String = "", retryAfter: String? = nil) -> H2Answer.Verdict {
        H2Answer(status: status, body: Array(body.utf8), retryAfter: retryAfter).verdict
    }

    @Test func everyRowOfTheTable() {
        #expect(verdict(200) == .accepted)
        #expect(verdict(410, #"{"reason":"Unregistered","timestamp":1700000000123}"#) == .unregistered(unregisteredAt: 1_700_000_000))
        #expect(verdict(410, #"{"reason":"ExpiredToken","timestamp":1600000000000}"#) == .unregistered(unregisteredAt: 1_600_000_000))
        #expect(verdict(400, #"{"reason":"BadDeviceToken"}"#) == .refusedForItsToken)
        #expect(verdict(400, #"{"reason":"DeviceTokenNotForTopic"}"#) == .refusedForItsToken)
        for (status, reason) in [(400, "BadCollapseId"), (400, "PayloadEmpty"), (400, "BadPriority"), (404, "BadPath"),
                                 (405, "MethodNotAllowed"), (413, "PayloadTooLarge")] {
            #expect(verdict(status, #"{"reason":"\#(reason)"}"#) == .refusedAsMalformed, "\(status) \(reason)")
        }
        for reason in ["BadCertificate", "BadCertificateEnvironment", "InvalidProviderToken", "MissingProviderToken", "Forbidden", "TopicDisallowed"] {
            #expect(verdict(403, #"{"reason":"\#(reason)"}"#) == .credentialRefused, "\(reason)")
        }
        #expect(verdict(400, #"{"reason":"TopicDisallowed"}"#) == .credentialRefused, "listed under 400 in one table, 403 in another")
        #expect(verdict(403, #"{"reason":"ExpiredProviderToken"}"#) == .providerTokenExpired)
        #expect(verdict(429, #"{"reason":"TooManyProviderTokenUpdates"}"#) == .tooManyTokenUpdates)
        #expect(verdict(429, #"{"reason":"TooManyRequests"}"#, retryAfter: " 7 ") == .retryLater(afterSeconds: 7))
        #expect(verdict(500, #"{"reason":"InternalServerError"}"#) == .retryLater(afterSeconds: nil))
        #expect(verdict(503, #"{"reason":"Shutdown"}"#) == .retryLater(afterSeconds: nil))
        #expect(verdict(418) == .unknown)
    }

    @Test func aBodyThatIsNotJSONStillHasAStatus() {
        let answer = H2Answer(status: 400, body: Array("<html>".utf8))
        #expect(answer.reason == nil && answer.verdict == .refusedAsMalformed)
        #expect(H2Answer(status: 410, body: []).verdict == .unregistered(unregisteredAt: nil))
        #expect(H2Answer(status: 410, reason: "Unregistered").description == "status 410 Unregistered")
    }

    @Test func aReasonIsAShortPrintableIdentifierOrANoteOfItsLengthWithTheTextEscaped() {
        #expect(H2Answer(status: 400, body: Array(#"{"reason":"BadDeviceToken"}"#.utf8)).reason == "BadDeviceToken")
        #expect(H2Answer(status: 400, body: Array("{\"reason\":\"\\u001b[31mRED\\u0007\"}".utf8)).reason
                == .unknown(#"(a reason of 9 bytes: "\u{1B}[31mRED\u{7}")"#))
        let long = String(repeating: "A", count: 100_000)
        #expect(H2Answer(status: 400, body: Array(#"{"reason":"\#(long)"}"#.utf8)).reason
                == .unknown(#"(a reason of 100000 bytes: "\#(String(repeating: "A", count: H2Answer.maxEscapedLength))...")"#))
        #expect(H2Answer.boundedReason(String(repeating: "B", count: 64)).count == 64)
        #expect(H2Answer.boundedReason("has space") == #"(a reason of 9 bytes: "has space")"#)
        #expect(H2Answer.boundedReason(#"say "\" é"#) == #"(a reason of 10 bytes: "say \"\\\" \u{E9}")"#)
        // Whatever a server sends, what is kept is printable ASCII and short.
        for text in ["\u{7}\u{1B}", String(repeating: "é", count: 500), String(repeating: "\"", count: 300)] {
            let kept = H2Answer.boundedReason(text)
            #expect(kept.utf8.allSatisfy { (0x20...0x7E).contains($0) } && kept.utf8.count < 100, "\(kept)")
        }
    }

    /// Apple's broadcast error list spells 503's reason "Service Unavailable";
    /// the device-push list "ServiceUnavailable": both are the one reason,
    /// shown in the table's spelling, retried as a server's trouble.
    @Test func appleSpacedSpellingOfAReasonIsThatReason() {
        let spaced = H2Answer(status: 503, body: Array(#"{"reason":"Service Unavailable"}"#.utf8))
        #expect(spaced.reason == .serviceUnavailable)
        #expect(spaced.reason?.name == "ServiceUnavailable")
        #expect(spaced.verdict == .retryLater(afterSeconds: nil))
        #expect(spaced.description == "status 503 ServiceUnavailable")
        #expect(APNsReason(name: "Too Many Requests") == .tooManyRequests)
        #expect(APNsReason(name: "Bad Device Token") == .badDeviceToken)
        #expect(APNsReason(name: "Not A Reason") == .unknown("Not A Reason"))
    }

    @Test func retryAfterIsCappedAndAServersTroubleIsNeverFinal() {
        #expect(verdict(429, #"{"reason":"TooManyRequests"}"#, retryAfter: "1000000000000") == .retryLater(afterSeconds: H2Answer.maxRetryAfterSeconds))
        #expect(verdict(503, retryAfter: "-5") == .retryLater(afterSeconds: 0))
        for status in [0, 301, 502, 504, 999] { #expect(verdict(status) == .unknown, "\(status)") }
    }
}

/// ``RetryBackoff``: the wait before a retry, without a clock.
@Suite struct RetryBackoffTests {
    /// What a server may put in `retry-after`, read as ``H2Answer`` reads it.
    static let retryAfters: [String?] = [nil, "0", "-5", "soon", "1", "7", "1000000000000"]

    /// Whatever the server says, a retry waits at least its backoff (at
    /// the jitter's lowest), and at least `retry-after` (capped at 60 s).
    @Test(arguments: retryAfters)
    func noRetryComesFasterThanItsBackoff(_ header: String?) {
        let after = H2Answer(status: 429, body: [], retryAfter: header).retryAfterSeconds
        for retries in 0...12 {
            for jitter in [RetryBackoff.jitter.lowerBound, 1, RetryBackoff.jitter.upperBound] {
                let wait = RetryBackoff.seconds(retries: retries, retryAfterSeconds: after, jitter: jitter)
                #expect(wait >= RetryBackoff.shortestSeconds(retries: retries), "\(header ?? "none"), retry \(retries)")
                #expect(wait >= RetryBackoff.baseSeconds(retries: retries) * jitter)
                #expect(wait >= Double(after ?? 0) && wait <= Double(H2Answer.maxRetryAfterSeconds) + RetryBackoff.maximumSeconds * 1.5)
            }
        }
    }

    @Test func zeroNegativeAndGarbageLeaveTheBackoffAsItIs() {
        for header in ["0", "-5", "soon", " ", "1e3"] {
            let after = H2Answer(status: 429, body: [], retryAfter: header).retryAfterSeconds
            #expect(RetryBackoff.seconds(retries: 3, retryAfterSeconds: after, jitter: 1) == 1.0, "\(header)")
        }
    }

    @Test func aLongerRetryAfterWinsAndIsCapped() {
        #expect(RetryBackoff.seconds(retries: 1, retryAfterSeconds: 7, jitter: 1.5) == 7)
        #expect(RetryBackoff.seconds(retries: 12, retryAfterSeconds: 7, jitter: 1) == 30)
        let capped = H2Answer(status: 429, body: [], retryAfter: "1000000000000").retryAfterSeconds
        #expect(RetryBackoff.seconds(retries: 1, retryAfterSeconds: capped, jitter: 1) == Double(H2Answer.maxRetryAfterSeconds))
    }

    /// 250 ms, doubling, at most 30 s; a reset (no retry counted) waits the first step.
    @Test func theScheduleDoublesFromAQuarterSecondToThirtySeconds() {
        #expect((0...10).map { RetryBackoff.baseSeconds(retries: $0) } == [0.25, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 30, 30])
        #expect(RetryBackoff.baseSeconds(retries: 1_000) == 30)
    }
}
