import Testing
import CampaignIO
import LocalTime
@testable import CampaignSend
@testable import GatewayClient

/// The server's trouble on the test clock (``ClockedH2Send``): a 429 or 503
/// is never final, no retry comes before its backoff whatever `retry-after`
/// says, and trouble that lasts the outage limit ends the send, resumable,
/// after exactly that much test-clock time: two minutes in a millisecond.
extension ConnectionEngineClockTests {
    /// When each token was asked for, in test-clock seconds.
    final class Arrivals: @unchecked Sendable {
        private let lock = Lock()
        private var times: [String: [Double]] = [:]
        func note(_ token: String, at t: Double) { lock.withLock { times[token, default: []].append(t) } }
        var byToken: [String: [Double]] { lock.withLock { times } }
    }

    /// Every request answered 429 with `retry-after: 0` twice, then 200:
    /// each retry waits at least its backoff (``RetryBackoff/shortestSeconds(retries:base:)``),
    /// the floor the server cannot lower; all are accepted in the end, none failed.
    @Test func retryAfterZeroIsAFloorNotAnOrder() throws {
        let arrivals = Arrivals()
        var clock: TestClock?
        let send = try ClockedH2Send(count: 4) { _ in
            PeerScript(answer: { token, _ in
                arrivals.note(token, at: clock!.elapsedSeconds)
                return arrivals.byToken[token]!.count <= 2 ? .status(429, body: #"{"reason":"TooManyRequests"}"#) : .accepted
            })
        }
        clock = send.clock
        let real = send.run()

        let base = send.settings.retryBackoffSeconds
        #expect(send.shared.report.accepted == 4 && send.shared.report.failed == 0)
        #expect(send.shared.report.resends == 8)
        for token in send.tokens {
            let at = arrivals.byToken[token] ?? []
            #expect(at.count == 3, "\(token): asked \(at.count) times")
            guard at.count == 3 else { continue }
            #expect(at[1] - at[0] >= RetryBackoff.shortestSeconds(retries: 1, base: base), "first retry after \(at[1] - at[0]) s")
            #expect(at[2] - at[1] >= RetryBackoff.shortestSeconds(retries: 2, base: base), "second retry after \(at[2] - at[1]) s")
        }
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }

    /// A retry is asked the schedule's verdict again, as its first try was
    /// when taken: a notification whose 429 sends it back past its window
    /// (`late: skip`) is skipped when its backoff ends, journaled as skipped
    /// (final, not failed), never sent late; with a window long enough, the
    /// same retry goes and is accepted.
    @Test func aRetryPastItsWindowIsSkippedNotSentLate() throws {
        for window in [2, 600] {
            let arrivals = Arrivals()
            var clock: TestClock?
            let schedule = DeliverySchedule.deliverAt(DeliverAt(localTime: TimeOfDay(text: "09:00")!, date: nil, windowSeconds: window,
                                                                defaultZone: "UTC", late: .skip))
            // A backoff of at least 2.5 s (5 s × a jitter of 0.5 to 1.5): past a window of 2 s.
            let send = try ClockedH2Send(count: 3, schedule: schedule, configure: { $0.retryBackoffSeconds = 5 }) { _ in
                PeerScript(answer: { token, _ in
                    arrivals.note(token, at: clock!.elapsedSeconds)
                    return arrivals.byToken[token]!.count == 1 ? .status(429, body: #"{"reason":"TooManyRequests"}"#) : .accepted
                })
            }
            clock = send.clock
            send.run()
            let report = send.shared.report, state = try send.journalState()
            if window == 2 {
                #expect(arrivals.byToken.values.allSatisfy { $0.count == 1 }, "asked once each, never again past the window: \(arrivals.byToken)")
                #expect(report.accepted == 0 && report.failed == 0 && report.skipped == 3, "\(report)")
                #expect(state.skipped.count == 3 && state.skipped.allSatisfy { $0.code == "late" })
            } else {
                #expect(arrivals.byToken.values.allSatisfy { $0.count == 2 }, "\(arrivals.byToken)")
                #expect(report.accepted == 3 && report.skipped == 0, "\(report)")
            }
        }
    }

    /// A server answering 503 to everything: never final; the send ends
    /// with the server's trouble once it has lasted `--outage-limit` of
    /// test-clock time (and not before), everything left pending for the resume.
    @Test func anOutageLastingTheLimitEndsTheSendWithEverythingPending() throws {
        let send = try ClockedH2Send(count: 3, configure: { $0.outageLimitSeconds = 120 }) { _ in
            PeerScript(answer: { _, _ in .status(503, body: #"{"reason":"ServiceUnavailable"}"#) })
        }
        let real = send.run()

        guard case .failed(.serverTrouble(let seconds, let count, _), _) = send.shared.runState else {
            Issue.record("the send did not end with the server's trouble: \(send.shared.runState)")
            return
        }
        #expect(seconds >= 120 && seconds < 160, "ended after \(seconds) s of trouble")
        #expect(count > 3, "\(count) troubles")
        #expect(send.clock.elapsedSeconds >= 120, "\(send.clock.elapsedSeconds) s of test-clock time")
        let report = send.shared.report
        #expect(report.accepted == 0 && report.failed == 0, "a server's trouble never makes a notification final")
        #expect(try send.journalState().doneCount == 0)
        #expect(real < Self.realSeconds * 2, "\(real) s of real time")
    }
}
