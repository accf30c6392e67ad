import APNSWire
import CampaignIO
import CampaignJSON
import CampaignTLS
import FeedbackStore
import ByteStreams

/// What a feedback run changed.
public struct FeedbackResult: Equatable, Sendable {
    public var tuplesRead = 0
    public var added = 0
    public var updated = 0
    /// Tuples left over from an interrupted earlier run, merged first.
    public var recovered = 0
    public var storeCount = 0

    public var text: String {
        "feedback: \(tuplesRead) tuples read, \(added) new, \(updated) updated\(recovered > 0 ? ", \(recovered) recovered from an interrupted run" : ""); the store holds \(storeCount)"
    }
}

/// Reads the feedback service and merges what it says into the suppression store.
///
/// The service clears its list once it has sent it, so tuples must not be lost
/// if this process dies mid-read: each chunk is appended to `STORE.incoming`
/// (0600) as it arrives; then the store is rewritten (temporary file, fsync,
/// rename) and the incoming file removed. A later run merges a leftover
/// incoming file first. The store itself is never left half-written.
public enum FeedbackClient {
    public static func incomingPath(store: String) -> String { store + ".incoming" }

    public static func run(
        host: String, port: Int, context: TLSContext, storePath: String,
        cancellation: CancellationPipe? = nil, proxy: HTTPProxy? = nil
    ) throws -> FeedbackResult {
        var result = FeedbackResult()
        var store = try FeedbackStore.load(path: storePath)
        let incoming = incomingPath(store: storePath)
        result.recovered = try mergeIncoming(incoming, into: &store, result: &result)

        let connection = try TLSConnection.connect(host: host, port: port, context: context, timeout: 30, cancellation: cancellation, proxy: proxy)
        let spool = try BufferedFileWriter(path: incoming, mode: SecureFile.privateMode, append: true)
        var decoder = FeedbackTupleDecoder()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = try connection.read(into: &buffer, cancellation: cancellation, deadline: .after(seconds: 60))
            if n == 0 { break }
            spool.buffer += buffer[0..<n]
            try spool.flush()
            decoder.append(buffer[0..<n])
            while let tuple = try decoder.next() {
                result.tuplesRead += 1
                let existed = store.entries[tuple.token] != nil
                if store.record(token: tuple.token, timestamp: tuple.timestamp) {
                    if existed { result.updated += 1 } else { result.added += 1 }
                }
            }
        }
        connection.close()
        if decoder.bufferedByteCount > 0 {
            throw IOError(path: "\(host):\(port)", reason: "the feedback service closed in the middle of a tuple (\(decoder.bufferedByteCount) bytes)")
        }
        try spool.sync()
        // What this run holds, merged (newest wins) into the store as it is
        // now, under its lock: a send may have added tokens meanwhile.
        let merged = store
        store = try FeedbackStore.update(path: storePath) { current in
            for (token, ts) in merged.entries { current.record(token: token, timestamp: ts) }
            return current
        }
        _ = unlinkFile(incoming)
        result.storeCount = store.count
        return result
    }

    /// Merges a leftover incoming file (raw tuples) into the store; returns how many tuples it held.
    package static func mergeIncoming(_ path: String, into store: inout FeedbackStore, result: inout FeedbackResult) throws -> Int {
        guard let bytes = try? readWholeFile(path, limit: 1 << 30) else { return 0 }
        var decoder = FeedbackTupleDecoder()
        decoder.append(bytes)
        var n = 0
        // A tuple cut by the crash at the end is dropped; the ones before it are whole.
        while let tuple = try? decoder.next() {
            n += 1
            let existed = store.entries[tuple.token] != nil
            if store.record(token: tuple.token, timestamp: tuple.timestamp) {
                if existed { result.updated += 1 } else { result.added += 1 }
            }
        }
        return n
    }
}

#if canImport(Glibc)
import Glibc
#endif
package func unlinkFile(_ path: String) -> Bool { unlink(path) == 0 }
