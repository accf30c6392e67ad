internal import CCSV

/// The row ``CSVTokenizer`` is assembling: every field's bytes (quotes
/// removed, doubled quotes undone) one after another, and their bounds.
public final class CSVRowBuffer {
    public let fields = ByteArena(capacity: 1024)
    /// (start, end) in ``fields`` per field. Kept in memory of its own, not
    /// an Array: appending to an Array member checked its uniqueness (an
    /// atomic load and a call) for every field.
    private var boundsStorage: UnsafeMutablePointer<Int>
    private var boundsCapacity = 64
    public private(set) var boundsCount = 0
    /// Whether the row has ended.
    public var ended = false

    public init() {
        boundsStorage = .allocate(capacity: boundsCapacity)
    }

    deinit { boundsStorage.deallocate() }

    public var fieldCount: Int { boundsCount / 2 }

    /// (start, end) in ``fields`` of each field so far; valid until the next append.
    public var bounds: UnsafeBufferPointer<Int> { UnsafeBufferPointer(start: boundsStorage, count: boundsCount) }

    /// The bytes of field `index`.
    public func field(_ index: Int) -> UnsafeBufferPointer<UInt8> {
        fields.bytes(boundsStorage[index * 2]..<boundsStorage[index * 2 + 1])
    }

    /// Empties the buffer for the next row, keeping its memory.
    public func clear() {
        fields.removeAll()
        boundsCount = 0
        ended = false
    }

    @inline(__always)
    func append(_ field: UnsafeRawBufferPointer) {
        if boundsCount + 2 > boundsCapacity { growBounds() }
        let start = fields.count
        fields.append(field)
        boundsStorage[boundsCount] = start
        boundsStorage[boundsCount + 1] = fields.count
        boundsCount += 2
    }

    private func growBounds() {
        let larger = UnsafeMutablePointer<Int>.allocate(capacity: boundsCapacity * 2)
        larger.update(from: boundsStorage, count: boundsCount)
        boundsStorage.deallocate()
        boundsStorage = larger
        boundsCapacity *= 2
    }
}

/// A CSV syntax error in strict mode: a quote inside an unquoted field, text
/// after a closing quote, or a quoted field still open at the end.
public struct CSVSyntaxError: Error, Equatable, Sendable {
    /// Bytes of the chunk accepted before the error.
    public var acceptedCount: Int
}

/// libcsv, in strict mode, behind a Swift class. The parser struct lives in
/// memory allocated here, so its address never moves; callbacks find the sink
/// through an unretained pointer that is valid for the call only.
public final class CSVTokenizer {
    private let parser: UnsafeMutablePointer<csv_parser>
    /// The field separator: `,` unless the audience says otherwise (`;`, tab).
    public let delimiter: UInt8

    public init(delimiter: UInt8 = UInt8(ascii: ",")) {
        self.delimiter = delimiter
        parser = .allocate(capacity: 1)
        csv_init(parser, UInt8(CSV_STRICT | CSV_STRICT_FINI))
        csv_set_delim(parser, delimiter)
    }

    deinit {
        csv_free(parser)
        parser.deallocate()
    }

    /// Where fields go. The callbacks reach it through an unretained pointer
    /// to this concrete final class: a protocol sink cost a retain and a
    /// release per field (a cast per field, before that, a tenth of planning).
    public let row = CSVRowBuffer()

    private static let fieldCallback: @convention(c) (UnsafeMutableRawPointer?, Int, UnsafeMutableRawPointer?) -> Void = { field, count, data in
        Unmanaged<CSVRowBuffer>.fromOpaque(data!)._withUnsafeGuaranteedRef { $0.append(UnsafeRawBufferPointer(start: field, count: count)) }
    }

    private static let rowCallback: @convention(c) (Int32, UnsafeMutableRawPointer?) -> Void = { _, data in
        Unmanaged<CSVRowBuffer>.fromOpaque(data!)._withUnsafeGuaranteedRef { $0.ended = true }
    }

    /// Feeds bytes; fields are added to ``row``, which is marked ended at a
    /// row's end. Feed a line at a time to see each row on its own.
    public func parse(_ bytes: UnsafeRawBufferPointer) throws(CSVSyntaxError) {
        guard bytes.count > 0 else { return }
        let accepted = csv_parse(parser, bytes.baseAddress, bytes.count, Self.fieldCallback, Self.rowCallback,
                                 Unmanaged.passUnretained(row).toOpaque())
        if accepted != bytes.count || csv_error(parser) == CSV_EPARSE {
            throw CSVSyntaxError(acceptedCount: accepted)
        }
    }

    /// Ends the input: a last row without a line break is delivered; an open
    /// quoted field is an error.
    public func finish() throws(CSVSyntaxError) {
        if csv_fini(parser, Self.fieldCallback, Self.rowCallback, Unmanaged.passUnretained(row).toOpaque()) != 0 {
            throw CSVSyntaxError(acceptedCount: 0)
        }
    }

    /// Field and row counts, for ``count(_:into:)``.
    public struct Counts {
        public var fields = 0
        public var rows = 0
        public init() {}
    }

    /// libcsv with callbacks that only count: the limit the benchmarks
    /// measure `plan` against. Nothing goes to ``row``.
    public func count(_ bytes: UnsafeRawBufferPointer, into counts: inout Counts) throws(CSVSyntaxError) {
        guard bytes.count > 0 else { return }
        let accepted = withUnsafeMutablePointer(to: &counts) { c in
            csv_parse(parser, bytes.baseAddress, bytes.count, { _, _, data in
                data!.assumingMemoryBound(to: Counts.self).pointee.fields += 1
            }, { _, data in
                data!.assumingMemoryBound(to: Counts.self).pointee.rows += 1
            }, c)
        }
        if accepted != bytes.count || csv_error(parser) == CSV_EPARSE {
            throw CSVSyntaxError(acceptedCount: accepted)
        }
    }

    /// Ends counted input.
    public func finishCounting(into counts: inout Counts) throws(CSVSyntaxError) {
        let result = withUnsafeMutablePointer(to: &counts) { c in
            csv_fini(parser, { _, _, data in
                data!.assumingMemoryBound(to: Counts.self).pointee.fields += 1
            }, { _, data in
                data!.assumingMemoryBound(to: Counts.self).pointee.rows += 1
            }, c)
        }
        if result != 0 { throw CSVSyntaxError(acceptedCount: 0) }
    }

    /// Forgets any partial row, to start again at a line boundary after an error.
    public func reset() {
        row.clear()
        csv_free(parser)
        csv_init(parser, UInt8(CSV_STRICT | CSV_STRICT_FINI))
        csv_set_delim(parser, delimiter)
    }
}
