#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignPlan
import PlanStream
import Synchronization
import ByteStreams

/// The parsers that read untrusted bytes, each as a function of one input.
///
/// A target returns normally for every input, good or bad: a bad input must
/// end in a typed error or a reject. What would be a bug (a crash, or a broken
/// invariant such as a row neither planned nor rejected) stops the process
/// with `fatalError`, which is what libFuzzer and the corpus replay tests catch.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// The gateway's notification decoder and the client's error-response and
    /// feedback decoders: the same bytes fed whole and in small chunks must
    /// decode alike, and what decodes must re-encode to a packet that decodes
    /// to the same notification.
    case wire
    /// A CSV audience planned with a fixed job: every row planned or rejected,
    /// every payload within the limit, and the plan reads back.
    case csv
    /// The same for an NDJSON audience.
    case ndjson
    /// A job file: JSON parsing and job checks; a job that loads is planned
    /// against a one-row audience.
    case job
    /// A plan stream read by both plan readers, which must agree.
    case plan

    /// Runs the target on one input.
    public func run(_ data: UnsafeRawBufferPointer) {
        let bytes = Array(data)
        switch self {
        case .wire: FuzzWire.run(bytes)
        case .csv: FuzzAudience.run(bytes, format: .csv)
        case .ndjson: FuzzAudience.run(bytes, format: .ndjson)
        case .job: FuzzJob.run(bytes)
        case .plan: FuzzPlan.run(bytes)
        }
    }

    public func run(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { run($0) }
    }
}

func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant broken: \(message())") }
}

enum FuzzWire {
    static func run(_ bytes: [UInt8]) {
        // The first byte picks a chunk size so chunk boundaries vary with the input.
        let chunk = Int(bytes.first ?? 0) % 7 + 1
        let whole = notifications(bytes, chunk: bytes.count + 1)
        let split = notifications(bytes, chunk: chunk)
        require(whole.packets == split.packets && whole.failure == split.failure,
                "the notification decoder depends on how the bytes were chunked: whole \(whole), in chunks of \(chunk) \(split)")
        for packet in whole.packets {
            let again = notifications(packet.encoded(), chunk: packet.encodedCount + 1)
            require(again.failure == nil && again.packets == [packet], "a decoded notification does not re-encode to itself")
        }
        var consumed = 0
        for packet in whole.packets { consumed += packet.encodedCount }
        require(consumed <= bytes.count, "decoded more bytes than were given")

        require(errorResponses(bytes, chunk: bytes.count + 1) == errorResponses(bytes, chunk: chunk),
                "the error-response decoder depends on chunking")
        require(feedback(bytes, chunk: bytes.count + 1) == feedback(bytes, chunk: chunk),
                "the feedback decoder depends on chunking")
    }

    struct Decoded: Equatable {
        var packets: [Notification] = []
        var failure: NotificationDecodingError?
    }

    /// Feeds `bytes` to `decode` in chunks of `chunk` bytes, until it returns false.
    static func inChunks(_ bytes: [UInt8], of chunk: Int, _ decode: (ArraySlice<UInt8>) -> Bool) {
        var offset = 0
        repeat {
            let end = min(bytes.count, offset + chunk)
            guard decode(bytes[offset..<end]) else { return }
            offset = end
        } while offset < bytes.count
    }

    static func notifications(_ bytes: [UInt8], chunk: Int) -> Decoded {
        var decoder = NotificationDecoder()
        var out = Decoded()
        inChunks(bytes, of: chunk) { slice in
            decoder.append(slice)
            do throws(NotificationDecodingError) {
                while let n = try decoder.next() { out.packets.append(Notification(n)) }
            } catch {
                out.failure = error
                _ = error.description
                return false
            }
            require(decoder.bufferedByteCount < 16 + 100 + 2048 + 64, "the decoder buffered more than one packet's worth")
            return true
        }
        return out
    }

    static func errorResponses(_ bytes: [UInt8], chunk: Int) -> [String] {
        var decoder = ErrorResponseDecoder()
        var out: [String] = []
        inChunks(bytes, of: chunk) { slice in
            decoder.append(slice)
            do throws(ResponseDecodingError) {
                while let r = try decoder.next() { out.append(r.description) }
                return true
            } catch {
                out.append(error.description)
                return false
            }
        }
        return out
    }

    static func feedback(_ bytes: [UInt8], chunk: Int) -> [String] {
        var decoder = FeedbackTupleDecoder()
        var out: [String] = []
        inChunks(bytes, of: chunk) { slice in
            decoder.append(slice)
            do throws(ResponseDecodingError) {
                while let t = try decoder.next() {
                    require((1...FeedbackTupleDecoder.maxTokenBytes).contains(t.token.count), "a feedback token of \(t.token.count) bytes")
                    out.append("\(t.timestamp) \(t.token)")
                }
                return true
            } catch {
                out.append(error.description)
                return false
            }
        }
        return out
    }
}

/// A scratch directory per process for the plans the targets write; each
/// run gets its own files (the replay tests run targets in parallel).
enum Scratch {
    static let directory: String = {
        // tmpfs when there is one: the plan writer fsyncs its trailer.
        let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        var template = Array("\(base)/campaign-fuzz-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "cannot create a scratch directory in \(base)")
        atexit { rmdir(Scratch.directory) }
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()
    static let counter = Atomic<Int>(0)

    /// Calls `body` with two fresh paths (plan, rejects), removed afterwards.
    static func withFiles<R>(_ body: (String, String) -> R) -> R {
        let n = counter.add(1, ordering: .relaxed).newValue
        let plan = "\(directory)/\(n).plan", rejects = "\(directory)/\(n).rejects"
        defer { unlink(plan); unlink(rejects) }
        return body(plan, rejects)
    }

    static let job: CampaignJob = {
        let text = """
        {"campaign":"fuzz","format":"frame","maxPayload":256,"fallback":{"pt":["es"],"*":["en","es"]},"priority":10,
         "messages":{"en":{"alert":"Hello {name|friend}, {offer} is yours","badge":"{badge|1}","sound":"default"},
                     "es":{"alert":"Hola {name|}: {offer} es tuyo"},
                     "pt-BR":{"alert":{"title":"Olá {name}","body":"{offer} 🎉 é seu"}}},
         "custom":{"campaign":"fuzz","offer":"{offer}","count":"{count:int|0}","vip":"{vip:bool|false}","score":"{score:number|1.5}","at":"{now:int}"}}
        """
        return try! CampaignJob(json: JSONValue.parse(text), path: "fuzz.json")
    }()
}

enum FuzzAudience {
    static func run(_ bytes: [UInt8], format: AudienceFormat) {
        let chunk = Int(bytes.last ?? 0) % 13 + 1
        let source = MemorySource(bytes, name: "audience", chunkSize: chunk)
        let reader: AudienceReader
        do {
            switch format {
            case .csv: reader = try CSVAudienceReader(source: source, path: "audience.csv", maxRowBytes: 4096)
            case .ndjson: reader = NDJSONAudienceReader(source: source, path: "audience.ndjson", maxRowBytes: 4096)
            }
        } catch {
            _ = "\(error)"
            return
        }
        plan(reader, job: Scratch.job)
    }

    /// Plans and reads the plan back, checking that no row went missing.
    static func plan(_ reader: AudienceReader, job: CampaignJob) {
        Scratch.withFiles { planPath, rejectsPath in plan(reader, job: job, planPath: planPath, rejectsPath: rejectsPath) }
    }

    static func plan(_ reader: AudienceReader, job: CampaignJob, planPath: String, rejectsPath: String) {
        let summary: PlanSummary
        do {
            let planner = try Planner(job: job, options: PlanOptions(now: 1_700_000_000))
            summary = try planner.run(reader: reader, plan: PlanWriter(path: planPath), rejects: RejectsWriter(path: rejectsPath))
        } catch {
            _ = "\(error)"   // an audience that cannot be read at all: a typed error
            return
        }
        require(summary.planned + summary.rejectedTotal == summary.rowsRead,
                "\(summary.rowsRead) rows read but \(summary.planned) planned and \(summary.rejectedTotal) rejected")
        do {
            let plan = try PlanReader(path: planPath)
            var count = 0
            while let record = try plan.next() {
                count += 1
                require(record.payload.count <= plan.header.maxPayload, "a payload of \(record.payload.count) bytes")
                require(PayloadInspector.problem(in: record.payload) == nil, "the planner wrote an invalid payload")
            }
            require(plan.isComplete && count == summary.planned, "the plan holds \(count) records, not \(summary.planned)")
        } catch {
            fatalError("the plan just written does not read back: \(error)")
        }
    }
}

enum FuzzJob {
    static func run(_ bytes: [UInt8]) {
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes)
        } catch {
            _ = error.description
            return
        }
        let text = value.serialized()
        require((try? JSONValue.parse(text)) == value, "JSON does not survive serializing and parsing again")
        let job: CampaignJob
        do {
            job = try CampaignJob(json: value, path: "job.json")
        } catch {
            _ = error.description
            return
        }
        let audience = Array("token,lang,name,offer\n\(String(repeating: "ab", count: 32)),pt-PT,Zoë,10% off\n".utf8)
        do {
            let reader = try CSVAudienceReader(source: MemorySource(audience), path: "one.csv")
            FuzzAudience.plan(reader, job: job)
        } catch {
            fatalError("the one-row audience did not open: \(error)")
        }
    }
}

enum FuzzPlan {
    static func run(_ bytes: [UInt8]) {
        let byRecord = read(bytes, views: false)
        let byView = read(bytes, views: true)
        // next() also refuses a record whose payload is not an APNs payload,
        // which nextView leaves to the gateway; up to there they must agree.
        if byRecord.last?.contains("the payload is not a JSON object") == true {
            require(Array(byView.prefix(byRecord.count - 1)) == byRecord.dropLast(), "the two plan readers disagree before a bad payload")
        } else {
            require(byRecord == byView, "the two plan readers disagree: \(byRecord) vs \(byView)")
        }
    }

    static func read(_ bytes: [UInt8], views: Bool) -> [String] {
        var out: [String] = []
        do {
            let reader = try PlanReader(source: MemorySource(bytes, chunkSize: 7), path: "plan")
            if views {
                while try reader.nextView({
                    out.append("\($0.seq) \($0.shard) \(Array($0.token)) \(Array($0.payload)) \($0.collapseId.map { Array($0) } ?? [])")
                }) {}
            } else {
                while let r = try reader.next() { out.append("\(r.seq) \(r.shard) \(r.token) \(r.payload) \(Array((r.collapseId ?? "").utf8))") }
            }
            out.append(reader.isComplete ? "complete" : "incomplete")
        } catch {
            out.append("\(error)")
        }
        return out
    }
}
