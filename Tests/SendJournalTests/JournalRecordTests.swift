import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
@testable import SendJournal

/// The journal's records as values: each kind encodes to the JSON
/// docs/journal.md tables and decodes back to itself.
@Suite struct JournalRecordTests {
    static let settings: SendSettings = {
        var s = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2195, certificate: "c.pem")
        s.planPath = "/p/plan"
        s.connections = 3
        return s
    }()

    static let records: [JournalRecord] = [
        .start(settings: settings, planHeader: .object([("header", .object([("v", .number("1"))]))])),
        .sent(below: [0: 12, 7: 3]),
        .done(shard: 2, ranges: [0..<5, 9..<10]),
        .presumed(shard: 1, ranges: [3..<4]),
        .fail(SendFailure(seq: 41, shard: 2, ordinal: 5, status: 8, token: [0xAB, 0x01], gaveUp: false)),
        .fail(SendFailure(seq: 42, shard: 0, ordinal: 6, status: 1, token: [0x00], gaveUp: true, attempts: 4)),
        .plan(records: 100, crc32: "0a1b2c3d", incomplete: false),
        .plan(records: 50, crc32: nil, incomplete: true),
        .counters(resends: 4, duplicatesRisked: 2, reconnects: 9),
        .counters(resends: 3, duplicatesRisked: 0, reconnects: 1, resentByKind: ["429 TooManyRequests": 2, "lost connection": 1]),
        .end(outcome: .interrupted, seconds: 2.965),
        .end(outcome: .complete),
        .tick(.init(second: 3, accepted: 120, failed: 1, resent: 4, connections: 2)),
    ]

    @Test func everyKindRoundTripsThroughItsJSON() throws {
        for record in Self.records {
            let text = String(decoding: record.json.serialized(), as: UTF8.self)
            #expect(JournalRecord(json: try JSONValue.parse(text)) == record, "\(text)")
        }
    }

    @Test func theJSONIsWhatTheDocumentationTables() {
        #expect(String(decoding: JournalRecord.done(shard: 2, ranges: [0..<5]).json.serialized(), as: UTF8.self)
                == #"{"t":"done","shard":2,"ranges":[[0,5]]}"#)
        #expect(String(decoding: JournalRecord.fail(SendFailure(seq: 1, shard: 0, ordinal: 0, status: 8, token: [0xAB], gaveUp: false)).json.serialized(), as: UTF8.self)
                == #"{"t":"fail","seq":1,"shard":0,"ordinal":0,"status":8,"protocol":"binary","token":"ab","gave_up":false,"attempts":1}"#)
        #expect(String(decoding: JournalRecord.fail(SendFailure(seq: 2, shard: 0, ordinal: 1, cause: .http(status: 400, reason: .badDeviceToken),
                                                                 token: [0xAB], gaveUp: false)).json.serialized(), as: UTF8.self)
                == #"{"t":"fail","seq":2,"shard":0,"ordinal":1,"status":400,"http_reason":"BadDeviceToken","protocol":"h2","token":"ab","gave_up":false,"attempts":1}"#)
        #expect(String(decoding: JournalRecord.end(outcome: .gaveUp).json.serialized(), as: UTF8.self) == #"{"t":"end","outcome":"gave-up"}"#)
    }

    /// A failure's cause is typed; the journal keeps the numbers and names it always had.
    @Test func aFailuresCauseReadsBackAsTheSameKind() throws {
        let failures: [JournalRecord] = [
            .fail(SendFailure(seq: 43, shard: 1, ordinal: 7, cause: .http(status: 410, reason: .unregistered), token: [0xCD], gaveUp: false,
                              unregisteredAt: 1_700_000_000)),
            .fail(SendFailure(seq: 44, shard: 1, ordinal: 8, cause: .http(status: 400, reason: nil), token: [0xCE], gaveUp: false)),
            .fail(SendFailure(seq: 45, shard: 1, ordinal: 9, cause: .http(status: 400, reason: .unknown("BadPayload")), token: [0xCF], gaveUp: false)),
            .fail(SendFailure(seq: 46, shard: 1, ordinal: 10, cause: .streamReset("INTERNAL_ERROR"), token: [0xD0], gaveUp: true, attempts: 5)),
        ]
        for record in failures {
            let text = String(decoding: record.json.serialized(), as: UTF8.self)
            #expect(JournalRecord(json: try JSONValue.parse(text)) == record, "\(text)")
        }
        #expect(FailureCause(status: 8, journaledReason: nil) == .binary(.invalidToken))
        #expect(FailureCause(status: 410, journaledReason: "Unregistered") == .http(status: 410, reason: .unregistered))
        #expect(FailureCause(status: 400, journaledReason: "") == .http(status: 400, reason: nil))
        #expect(FailureCause(status: 500, journaledReason: nil) == .http(status: 500, reason: nil))
        #expect(FailureCause(status: 0, journaledReason: "CANCEL") == .streamReset("CANCEL"))
        #expect(FailureCause.binary(.invalidToken).description == "invalid token")
        #expect(FailureCause.http(status: 410, reason: .unregistered).description == "HTTP 410 Unregistered")
        #expect(SendFailure(seq: 1, shard: 0, ordinal: 0, cause: .binary(.unknown), token: [], gaveUp: true, attempts: 5).reason
                .hasPrefix("quarantined"))
        #expect(SendFailure(seq: 1, shard: 0, ordinal: 0, cause: .http(status: 400, reason: .badDeviceToken), token: [], gaveUp: false).reason
                == "HTTP 400 BadDeviceToken")
    }

    /// A `fail` record names the interface that answered (`protocol`), and
    /// its cause reads back exactly from it; a line of a journal from before
    /// `protocol` is read from its status and reason as it always was.
    @Test(arguments: [
        FailureCause.binary(.invalidToken), .http(status: 410, reason: .unregistered), .http(status: 400, reason: nil),
        .streamReset("INTERNAL_ERROR"), .binary(.processingError), .http(status: 500, reason: nil),
    ])
    func aFailuresCauseIsJournaledWithItsInterface(cause: FailureCause) throws {
        let record = JournalRecord.fail(SendFailure(seq: 7, shard: 0, ordinal: 3, cause: cause, token: [0xAB], gaveUp: false))
        let json = record.json
        #expect(json["protocol"]?.stringValue == cause.interface.rawValue)
        let text = String(decoding: json.serialized(), as: UTF8.self)
        #expect(JournalRecord(json: try JSONValue.parse(text)) == record, "\(text)")
    }

    @Test func aFailLineWithoutItsInterfaceIsReadAsBefore() throws {
        func cause(_ line: String) throws -> FailureCause? {
            guard case .fail(let f)? = JournalRecord(json: try JSONValue.parse(line)) else { return nil }
            return f.cause
        }
        let old = [
            (#"{"t":"fail","seq":1,"shard":0,"ordinal":0,"status":8,"token":"ab","gave_up":false,"attempts":1}"#, FailureCause.binary(.invalidToken)),
            (#"{"t":"fail","seq":2,"shard":0,"ordinal":1,"status":410,"http_reason":"Unregistered","token":"ab","gave_up":false,"attempts":1}"#,
             .http(status: 410, reason: .unregistered)),
            (#"{"t":"fail","seq":3,"shard":0,"ordinal":2,"status":400,"http_reason":"","token":"ab","gave_up":false,"attempts":1}"#,
             .http(status: 400, reason: nil)),
            (#"{"t":"fail","seq":4,"shard":0,"ordinal":3,"status":0,"http_reason":"CANCEL","token":"ab","gave_up":true,"attempts":5}"#,
             .streamReset("CANCEL")),
        ]
        for (line, expected) in old {
            #expect(try cause(line) == expected, "\(line)")
        }
        // The journaled interface decides, not the status's range.
        #expect(FailureCause(status: 8, journaledReason: nil, interface: .http2) == .http(status: 8, reason: nil))
        #expect(FailureCause(status: 8, journaledReason: nil, interface: nil) == .binary(.invalidToken))
    }

    /// Each run's wall-clock start, for the page; a start without one (older journals) stays nil.
    @Test func aRunsClockIsReplayedForItsRun() throws {
        let record = JournalRecord.clock(unixSeconds: 1_790_000_000)
        #expect(String(decoding: record.json.serialized(), as: UTF8.self) == #"{"t":"clock","at":1790000000}"#)
        #expect(JournalRecord(json: try JSONValue.parse(#"{"t":"clock","at":1790000000}"#)) == record)
        var state = JournalState(settings: Self.settings, planHeader: .null)
        for r in [JournalRecord.start(settings: Self.settings, planHeader: .null), .start(settings: Self.settings, planHeader: .null), record] {
            Journal.apply(r, to: &state)
        }
        #expect(state.runStartedAt == [nil, 1_790_000_000])
    }

    /// A journal that cannot be replayed says why, as a reason tests match;
    /// the sentence is the one the operator always read.
    @Test func anUnusableJournalSaysWhy() throws {
        let dir = TemporaryDirectory("journal-errors")
        #expect { try Journal.read(directory: dir.file("none")) } throws: {
            guard let e = $0 as? JournalError, case .noJournal = e.reason else { return false }
            return e.description.hasPrefix("\(dir.file("none")): holds no journal (")
        }
        try FileManager.default.createDirectory(atPath: dir.file("empty"), withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: dir.file("empty/\(Journal.logName)"), contents: Data())
        #expect { try Journal.read(directory: dir.file("empty")) } throws: {
            ($0 as? JournalError)?.reason == .empty
                && "\($0)".hasSuffix("is empty: the send stopped before its start record, so nothing was sent; remove the directory and start the send again.")
        }
        let journal = try Journal.create(directory: dir.file("busy"), settings: Self.settings, planHeader: .null)
        #expect { try Journal.resume(directory: dir.file("busy")) } throws: {
            guard let e = $0 as? JournalError, case .busy = e.reason else { return false }
            return e.isBusy && "\(e)".contains("is using this journal")
        }
        _ = journal
    }

    @Test func unknownKindsAreSkippedNotMisread() throws {
        #expect(JournalRecord(json: try JSONValue.parse(#"{"t":"from-the-future","x":1}"#)) == nil)
        #expect(JournalRecord(json: try JSONValue.parse(#"{"t":"start"}"#)) == nil, "a start without settings")
        // An outcome another version journaled is kept as its word, not dropped.
        #expect(JournalRecord(json: try JSONValue.parse(#"{"t":"end","outcome":"failed"}"#)) == .end(outcome: .unrecognized("failed")))
        #expect(SendOutcome(rawValue: "gave-up") == .gaveUp && SendOutcome.unrecognized("failed").rawValue == "failed")
    }

    /// The hand-built `sent` line (the hot path) says what the record says,
    /// and a journal of every kind replays to the state they describe.
    @Test func aJournalOfEveryKindReplays() throws {
        let dir = TemporaryDirectory("journal-records")
        let journal = try Journal.create(directory: dir.file("j"), settings: Self.settings, planHeader: .null)
        try journal.appendSent(shards: [0, 7], below: [12, 0, 0, 0, 0, 0, 0, 3])
        for record in Self.records.dropFirst(2) { try journal.append(record) }
        try journal.checkpoint()
        let state = try Journal.read(directory: dir.file("j"))
        #expect(state.settings == Self.settings)
        #expect(state.sentBelow == [0: 12, 7: 3])
        #expect(state.accepted == 6 && state.presumed == 1)
        #expect(state.failures.map(\.seq) == [41, 42] && state.failures[0].token == [0xAB, 0x01])
        #expect(state.done[2]?.contains(5) == true && state.done[2]?.contains(9) == true && state.done[2]?.contains(6) == false)
        #expect(state.planRecords == 50 && state.planIncomplete && state.planChecksum == nil, "the later plan record wins")
        #expect(state.resends == 7 && state.duplicatesRisked == 2 && state.reconnects == 10)
        #expect(state.resentByKind == ["429 TooManyRequests": 2, "lost connection": 1])
        #expect(state.outcome == .complete)
        #expect(state.runs == 1)
        #expect(state.timeline == [[.init(second: 3, accepted: 120, failed: 1, resent: 4, connections: 2)]])
        let sentLine = try String(contentsOfFile: dir.file("j/journal.log"), encoding: .utf8).split(separator: "\n")[1].dropFirst(9)
        #expect(JournalRecord(json: try JSONValue.parse(String(sentLine))) == .sent(below: [0: 12, 7: 3]))
    }

    /// A run killed before its end wrote no counters: its last tick counts
    /// its resends and connections, once, in the whole send; a resume's
    /// first counters (possible duplicates only) change nothing of that.
    @Test func aKilledRunCountsByItsLastTick() throws {
        let dir = TemporaryDirectory("journal-killed")
        let journal = try Journal.create(directory: dir.file("j"), settings: Self.settings, planHeader: .null)
        func tick(_ second: Int, _ resent: Int, _ connections: Int, _ kinds: [String: Int]) -> JournalRecord {
            .tick(.init(second: second, accepted: 10 * second, failed: 0, resent: resent, connections: connections, resentByKind: kinds))
        }
        let killed: [JournalRecord] = [.clock(unixSeconds: 1_700_000_000), tick(1, 2, 4, ["429 TooManyRequests": 2]),
                                       tick(2, 5, 5, ["429 TooManyRequests": 3, "503 ServiceUnavailable": 2])]
        for record in killed { try journal.append(record) }
        try journal.checkpoint()
        var state = try Journal.read(directory: dir.file("j"))
        #expect(state.resends == 5 && state.reconnects == 5 && state.resentByKind == ["429 TooManyRequests": 3, "503 ServiceUnavailable": 2],
                "a run without an end, as status sees it")
        let resumed: [JournalRecord] = [
            .counters(resends: 0, duplicatesRisked: 7, reconnects: 0),
            .start(settings: Self.settings, planHeader: .null), .clock(unixSeconds: 1_700_000_100),
            tick(1, 1, 4, ["lost connection": 1]),
            .counters(resends: 3, duplicatesRisked: 1, reconnects: 4, resentByKind: ["lost connection": 1, "503 ServiceUnavailable": 2]),
            .end(outcome: .complete),
        ]
        for record in resumed { try journal.append(record) }
        try journal.checkpoint()
        state = try Journal.read(directory: dir.file("j"))
        #expect(state.runs == 2 && state.runOutcomes == [nil, .complete])
        #expect(state.resends == 8 && state.reconnects == 9 && state.duplicatesRisked == 8)
        #expect(state.resentByKind == ["429 TooManyRequests": 3, "503 ServiceUnavailable": 4, "lost connection": 1])
    }

    /// The whole send's time: an ended run's own (to the millisecond), a
    /// killed run's last journaled second, an older journal's run (an end
    /// without its time) by its ticks.
    @Test func theSendsTimeIsEachEndedRunsOwnAndAKilledRunsLastSecond() throws {
        let dir = TemporaryDirectory("journal-seconds")
        let journal = try Journal.create(directory: dir.file("j"), settings: Self.settings, planHeader: .null)
        let tick = { (second: Int) in JournalRecord.tick(.init(second: second, accepted: second, failed: 0, resent: 0, connections: 1)) }
        let runs: [JournalRecord] = [
            tick(1), tick(2), .end(outcome: .interrupted, seconds: 2.965),            // ended: 2.965, not 2
            .start(settings: Self.settings, planHeader: .null), .end(outcome: .gaveUp, seconds: 0.073),   // no tick at all
            .start(settings: Self.settings, planHeader: .null), tick(1), tick(2), tick(3),                  // killed: 3
            .start(settings: Self.settings, planHeader: .null), tick(1), .end(outcome: .complete),         // older: 1
        ]
        for record in runs { try journal.append(record) }
        try journal.checkpoint()
        let state = try Journal.read(directory: dir.file("j"))
        #expect(state.runs == 4)
        #expect(abs(state.sendingSeconds - (2.965 + 0.073 + 3 + 1)) < 1e-9, "\(state.sendingSeconds)")
        #expect(String(decoding: JournalRecord.end(outcome: .complete, seconds: 0.0726).json.serialized(), as: UTF8.self)
                == #"{"t":"end","outcome":"complete","seconds":0.073}"#)
    }

    /// A killed run that `campaign cancel` ended (an end with no counters
    /// before it) keeps its resends and connections, from its last tick.
    @Test func aKilledRunEndedByACancelKeepsWhatItsLastTickCounted() throws {
        let dir = TemporaryDirectory("journal-cancelled")
        let journal = try Journal.create(directory: dir.file("j"), settings: Self.settings, planHeader: .null)
        for record: JournalRecord in [.tick(.init(second: 1, accepted: 50, failed: 0, resent: 4, connections: 3, resentByKind: ["lost connection": 4])),
                                      .tick(.init(second: 2, accepted: 90, failed: 1, resent: 54, connections: 10, resentByKind: ["lost connection": 51, "1 processing error": 3])),
                                      .end(outcome: .cancelled)] {
            try journal.append(record)
        }
        try journal.checkpoint()
        let state = try Journal.read(directory: dir.file("j"))
        #expect(state.resends == 54 && state.reconnects == 10, "\(state.resends) resends, \(state.reconnects) connections")
        #expect(state.resentByKind == ["lost connection": 51, "1 processing error": 3])
        #expect(state.outcome == .cancelled)
    }

    /// A journal from before `counters` held kinds: a run's kinds are its last tick's.
    @Test func anOlderJournalsKindsComeFromTheRunsLastTick() throws {
        let dir = TemporaryDirectory("journal-older")
        let journal = try Journal.create(directory: dir.file("j"), settings: Self.settings, planHeader: .null)
        for record: JournalRecord in [.tick(.init(second: 1, accepted: 5, failed: 0, resent: 2, connections: 2, resentByKind: ["429 TooManyRequests": 2])),
                                      .counters(resends: 3, duplicatesRisked: 0, reconnects: 2), .end(outcome: .complete)] {
            try journal.append(record)
        }
        try journal.checkpoint()
        let state = try Journal.read(directory: dir.file("j"))
        #expect(state.resends == 3 && state.reconnects == 2 && state.resentByKind == ["429 TooManyRequests": 2])
    }
}
