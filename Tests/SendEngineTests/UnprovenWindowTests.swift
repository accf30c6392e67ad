import Testing
import APNSWire
@testable import GatewayClient
@testable import SendEngine

/// The unproven window without sockets: packets encoded as the sender
/// encodes them, answers made up as a gateway would give them.
@Suite struct UnprovenWindowTests {
    /// A window of `count` enhanced notifications (seq 1…count, shard seq % 3,
    /// ordinal seq / 3, token bytes all equal to seq), then a proof when asked.
    struct Fixture {
        var window = UnprovenWindow()
        var packets: [UInt8] = []
        let proofIdentifier: UInt32 = 0x8000_0001

        init(count: Int, proof: Bool = true, attempts: (UInt64) -> UInt8 = { _ in 0 }) {
            for seq in 1...UInt64(count) {
                let start = packets.count
                NotificationEncoder.appendEnhanced(identifier: UInt32(seq), expiry: 0, token: [UInt8](repeating: UInt8(seq), count: 32),
                                                   payload: Array(#"{"aps":{"alert":"n"}}"#.utf8), to: &packets)
                window.append(InFlight(seq: seq, shard: Int32(seq % 3), ordinal: Int32(seq / 3), identifier: UInt32(seq),
                                       start: start, end: packets.count, attempts: attempts(seq)))
            }
            if proof {
                let start = packets.count
                NotificationEncoder.appendProof(identifier: proofIdentifier, format: .enhanced, to: &packets)
                window.appendProof(identifier: proofIdentifier, start: start, end: packets.count)
            }
        }

        func resolve(_ status: ErrorResponse.Status, _ identifier: UInt32) -> UnprovenWindow.Resolution? {
            window.resolve(ErrorResponse(status: status, identifier: identifier), packets: packets, format: .enhanced)
        }
    }

    func acceptedSeqs(_ outcome: ProofOutcome) -> Set<UInt64> {
        Set(outcome.acceptedOrdinals.flatMap { shard, ordinals in ordinals.map { UInt64($0) * 3 + UInt64(shard) } })
    }

    /// The backoff of a notification the gateway refused for its own
    /// trouble: never below half the doubled base, never above 1.5 × 30 s.
    @Test func theRetryBackoffDoublesWithJitterToItsCap() {
        for retries in 1...20 {
            let nominal = min(RetryBackoff.maximumSeconds, 0.25 * Double(1 << min(retries - 1, 16)))
            for _ in 0..<50 {
                let s = RetryBackoff.seconds(retries: retries, base: 0.25)
                #expect(s >= nominal * 0.5 && s <= nominal * 1.5, "retry \(retries): \(s) s")
            }
        }
        #expect(RetryBackoff.seconds(retries: 0, base: 0.25) >= 0.125, "a first retry waits too")
    }

    @Test func theProofAnsweredProvesEverythingBeforeIt() throws {
        let f = Fixture(count: 10)
        #expect(f.window.notificationCount == 10 && f.window.hasProof)
        let r = try #require(f.resolve(.invalidTokenSize, f.proofIdentifier))
        #expect(r.outcome.accepted == 10)
        #expect(acceptedSeqs(r.outcome) == Set(1...10))
        #expect(r.outcome.failures.isEmpty && r.resend.isEmpty && r.refusedAsMalformed.isEmpty)
    }

    @Test func anErrorSplitsTheWindowAtTheNamedNotification() throws {
        let f = Fixture(count: 10)
        let r = try #require(f.resolve(.invalidToken, 4))
        #expect(acceptedSeqs(r.outcome) == [1, 2, 3])
        #expect(r.outcome.failures.map(\.seq) == [4])
        #expect(r.outcome.failures.first?.token == [UInt8](repeating: 4, count: 32), "the failure carries the named packet's token")
        #expect(r.outcome.failures.first?.gaveUp == false)
        // Discarded after it: sent again in order, exactly as encoded, the proof not among them.
        #expect(r.resend.map(\.seq) == Array(5...10))
        #expect(r.resend.allSatisfy { $0.packet.count == 32 + 11 + 2 + 21 && $0.packet[1...4] == [0, 0, 0, UInt8($0.seq)][...] })
    }

    /// Status 1, 255 and codes no guide defines are the gateway's state,
    /// never final however often they come: what followed the named one goes
    /// again at once (the gateway discarded it), the named one after a
    /// backoff, one refusal more counted (saturating: never a limit).
    @Test(arguments: [ErrorResponse.Status.processingError, .unknown, ErrorResponse.Status(rawValue: 200)])
    func theGatewaysTroubleIsNeverFinal(status: ErrorResponse.Status) throws {
        for attempts in [UInt8(0), 3, 200, .max] {
            let f = Fixture(count: 5, attempts: { $0 == 2 ? attempts : 0 })
            let r = try #require(f.resolve(status, 2))
            #expect(acceptedSeqs(r.outcome) == [1])
            #expect(r.outcome.failures.isEmpty, "status \(status.rawValue) after \(attempts) attempts: \(r.outcome.failures.map(\.reason))")
            #expect(r.resend.map(\.seq) == [3, 4, 5], "status \(status.rawValue): the discarded ones, at once")
            #expect(r.retryLater.map(\.seq) == [2], "status \(status.rawValue) after \(attempts) attempts")
            #expect(r.retryLater.first?.attempts == (attempts == .max ? .max : attempts + 1))
            #expect(r.retryLater.first?.packet == Array(f.packets[f.window.entries[1].start..<f.window.entries[1].end]), "exactly as encoded")
        }
    }

    @Test func malformedStatusesAreFinalAndReported() throws {
        for status in [ErrorResponse.Status.missingPayload, .invalidPayloadSize, .protocolError] {
            let r = try #require(Fixture(count: 3).resolve(status, 3))
            #expect(r.outcome.failures.map(\.status) == [Int(status.rawValue)])
            #expect(r.refusedAsMalformed.map(\.seq) == [3])
            #expect(r.resend.isEmpty)
        }
    }

    @Test func aShutdownNamesTheLastAcceptedAndEverythingAfterGoesAgain() throws {
        let f = Fixture(count: 6)
        let r = try #require(f.resolve(.shutdown, 4))
        #expect(r.wasShutdown)
        #expect(acceptedSeqs(r.outcome) == [1, 2, 3, 4])
        #expect(r.resend.map(\.seq) == [5, 6])
        let none = try #require(f.resolve(.shutdown, 0))
        #expect(none.outcome.accepted == 0 && none.resend.map(\.seq) == Array(1...6))
    }

    @Test func anIdentifierNeverSentIsNoProof() {
        let f = Fixture(count: 3)
        #expect(f.resolve(.invalidToken, 99) == nil)
        #expect(f.resolve(.shutdown, 99) == nil)
    }

    @Test func aLostConnectionProvesNothingAndRisksWhatWasWritten() {
        let f = Fixture(count: 8)
        let written = f.window.entries[5].start   // five packets fully written
        let (lost, wasWritten, risked) = f.window.lost(written: written)
        #expect(lost.map(\.seq) == Array(1...8), "every notification, not the proof")
        #expect(wasWritten == 5 && risked == 5)
        #expect(lost.map(\.risked) == Array(repeating: true, count: 5) + Array(repeating: false, count: 3), "the written come back marked")
        #expect(f.window.lost(written: 0).risked == 0)
    }

    /// A notification lost with three connections in a row is one possible
    /// duplicate, not three (a trial counted 5,014 for 400 devices' copies).
    @Test func aNotificationLostAgainIsCountedOnce() {
        let f = Fixture(count: 4)
        let written = f.window.entries[4].start   // all four written
        let (lost, _, risked) = f.window.lost(written: written)
        #expect(risked == 4)
        let resends = lost.map { Resend($0, packets: f.packets) }
        #expect(resends.allSatisfy { $0.risked }, "a resend carries the mark")
        // Sent again on the next connection, as the worker appends them, and lost again.
        var again = UnprovenWindow()
        var offset = 0
        for r in resends {
            again.append(InFlight(seq: r.seq, shard: r.shard, ordinal: r.ordinal, identifier: r.identifier, start: offset,
                                  end: offset + r.packet.count, attempts: r.attempts, risked: r.risked))
            offset += r.packet.count
        }
        let second = again.lost(written: offset)
        #expect(second.writtenCount == 4 && second.risked == 0, "already counted")
    }

    @Test func theSimpleFormatPresumesWhatWasWritten() {
        let f = Fixture(count: 4, proof: false)
        let outcome = f.window.presumed()
        #expect(outcome.presumed == 4 && outcome.accepted == 0)
        #expect(outcome.presumedOrdinals.values.map(\.count).reduce(0, +) == 4)
    }

    @Test func resendsQueueFrontFirst() {
        var queue = ResendQueue()
        let f = Fixture(count: 4, proof: false)
        queue.pushFront([Resend(f.window.entries[2], packets: f.packets), Resend(f.window.entries[3], packets: f.packets)])
        #expect(queue.popFirst()?.seq == 3)
        queue.pushFront([Resend(f.window.entries[0], packets: f.packets)])
        #expect([queue.popFirst()?.seq, queue.popFirst()?.seq, queue.popFirst()?.seq] == [1, 4, nil])
        #expect(queue.isEmpty)
    }

    @Test func theFifthLostConnectionHeadedByTheSameNotificationParksIt() {
        var strikes = DropStrikes()
        var results = (1...5).map { _ in strikes.strike(7) }
        #expect(results == [false, false, false, false, true])
        let again = strikes.strike(7)
        #expect(!again, "forgotten once parked")
        results = (1...3).map { _ in strikes.strike(7) }
        strikes.clear()
        results += (1...4).map { _ in strikes.strike(7) }
        #expect(!results.contains(true), "a clear starts the count again")
    }
}
