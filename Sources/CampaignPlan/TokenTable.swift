#if canImport(Glibc)
import Glibc
#endif
internal import CIOShims

/// A hash table of device tokens of one byte width, stored inline: one control
/// byte and the token's bytes per slot (33 bytes for 32-byte tokens), plus an
/// optional 4-byte value. Linear probing on control bytes, growth by half, so
/// a million unique 32-byte tokens take 45 to 70 MB rather than the ~150 MB
/// of a `Set<[UInt8]>`.
struct TokenTable {
    private(set) var count = 0
    /// Control bytes (0: empty; otherwise 0x80 | 7 bits of the hash), then
    /// the keys, then the values, in one mapping.
    private var memory: TableMemory
    /// Where the slots are: what lookups use.
    private(set) var view: TableView

    init(width: Int, hasValues: Bool, capacity: Int = 1024) {
        memory = TableMemory(capacity: capacity, width: width, hasValues: hasValues)
        view = TableView(memory: memory)
    }

    /// The bytes held per slot, for memory estimates.
    var bytesPerSlot: Int { 1 + view.width + (view.hasValues ? 4 : 0) }
    var allocatedBytes: Int { view.capacity * bytesPerSlot }

    @inline(__always)
    static func hash(_ token: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h: UInt64 = 0x243F_6A88_85A3_08D3 ^ UInt64(token.count)
        var i = 0
        let raw = UnsafeRawBufferPointer(token)
        while i + 8 <= token.count {
            h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0x9E37_79B9_7F4A_7C15
            h ^= h >> 29
            i += 8
        }
        while i < token.count {
            h = (h ^ UInt64(token[i])) &* 0x100_0000_01B3
            i += 1
        }
        h ^= h >> 32
        h = h &* 0xD6E8_FEB8_6659_FD93
        return h ^ (h >> 32)
    }

    /// Inserts or replaces; returns whether the token was new.
    @discardableResult
    mutating func insert(_ token: UnsafeBufferPointer<UInt8>, hash: UInt64, value: UInt32 = 0) -> Bool {
        if (count + 1) * 5 > view.capacity * 4 { grow() }
        if !isKnownUniquelyReferenced(&memory) {
            memory = memory.copy()
            view = TableView(memory: memory)
        }
        let (slot, found) = view.find(token, hash: hash)
        if view.hasValues { view.values[slot] = value }
        if found { return false }
        view.control[slot] = UInt8(truncatingIfNeeded: hash >> 57) | 0x80
        (view.keys + slot * view.width).update(from: token.baseAddress!, count: view.width)
        count += 1
        return true
    }

    private mutating func grow() {
        let old = self
        self = TokenTable(width: view.width, hasValues: view.hasValues, capacity: view.capacity + view.capacity / 2)
        old.forEach { token, value in insert(token, hash: Self.hash(token), value: value) }
    }

    /// Every token and value, in no particular order.
    func forEach(_ body: (UnsafeBufferPointer<UInt8>, UInt32) -> Void) {
        withExtendedLifetime(memory) {
            for slot in 0..<view.capacity where view.control[slot] != 0 {
                body(UnsafeBufferPointer(start: view.keys + slot * view.width, count: view.width), view.hasValues ? view.values[slot] : 0)
            }
        }
    }
}

/// What a lookup needs of a table, and nothing it owns: plain values and
/// pointers, so reading one retains nothing (reading a `TokenTable` out of
/// an array copied it, a retain and a release of its mapping, per probe).
/// Valid while its table's mapping lives: `TokenSet` keeps both.
struct TableView {
    let width: Int
    let capacity: Int
    let hasValues: Bool
    let control: UnsafeMutablePointer<UInt8>
    let keys: UnsafeMutablePointer<UInt8>
    let values: UnsafeMutablePointer<UInt32>

    init(memory: TableMemory) {
        width = memory.width
        capacity = memory.capacity
        hasValues = memory.hasValues
        control = memory.control
        keys = memory.keys
        values = memory.values
    }

    @inline(__always)
    private func home(_ hash: UInt64) -> Int {
        Int(truncatingIfNeeded: (UInt64(UInt32(truncatingIfNeeded: hash)) &* UInt64(capacity)) >> 32)
    }

    /// The slot holding `token`, or the empty slot where it would go.
    @inline(__always)
    func find(_ token: UnsafeBufferPointer<UInt8>, hash: UInt64) -> (slot: Int, found: Bool) {
        let tag = UInt8(truncatingIfNeeded: hash >> 57) | 0x80
        var slot = home(hash)
        while true {
            let t = control[slot]
            if t == 0 { return (slot, false) }
            if t == tag, memcmp(keys + slot * width, token.baseAddress!, width) == 0 { return (slot, true) }
            slot += 1
            if slot == capacity { slot = 0 }
        }
    }

    /// Starts loading the slot `hash` leads to, for a lookup a little later.
    @inline(__always)
    func prefetch(hash: UInt64) {
        let slot = home(hash)
        campaign_prefetch(control + slot)
        campaign_prefetch(keys + slot * width)
    }

    @inline(__always)
    func contains(_ token: UnsafeBufferPointer<UInt8>, hash: UInt64) -> Bool {
        find(token, hash: hash).found
    }

    func value(for token: UnsafeBufferPointer<UInt8>, hash: UInt64) -> UInt32? {
        let (slot, found) = find(token, hash: hash)
        return found ? values[slot] : nil
    }
}

/// A table's slots in one anonymous mapping. The kernel hands its pages out
/// zeroed as they are first touched (no pass of memset over tens of MB before
/// the first row), and a table of 4 MiB or more asks for 2 MiB pages
/// (`MADV_HUGEPAGE`, where transparent huge pages are allowed): each probe of
/// a 50 MB table at a random slot otherwise missed the TLB.
final class TableMemory {
    let control: UnsafeMutablePointer<UInt8>
    let keys: UnsafeMutablePointer<UInt8>
    let values: UnsafeMutablePointer<UInt32>
    private let mapping: UnsafeMutableRawPointer
    private let mappedBytes: Int
    let capacity: Int, width: Int, hasValues: Bool

    private static let hugePage = 2 << 20

    init(capacity: Int, width: Int, hasValues: Bool) {
        self.capacity = capacity
        self.width = width
        self.hasValues = hasValues
        let valuesOffset = (capacity * (1 + width) + 63) & ~63
        let bytes = valuesOffset + (hasValues ? capacity * 4 : 0)
        let huge = bytes >= 4 << 20
        // Room to start on a 2 MiB boundary, which huge pages need.
        mappedBytes = bytes + (huge ? Self.hugePage : 0)
        guard let p = mmap(nil, mappedBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              p != UnsafeMutableRawPointer(bitPattern: -1) else {
            fatalError("cannot map \(mappedBytes) bytes for the token table: \(String(cString: strerror(errno)))")
        }
        mapping = p
        var start = p
        if huge {
            let address = Int(bitPattern: p)
            start = p + ((Self.hugePage - address % Self.hugePage) % Self.hugePage)
            _ = madvise(start, bytes, MADV_HUGEPAGE)
        }
        control = start.bindMemory(to: UInt8.self, capacity: capacity * (1 + width))
        keys = control + capacity
        values = (start + valuesOffset).bindMemory(to: UInt32.self, capacity: hasValues ? capacity : 0)
    }

    deinit { munmap(mapping, mappedBytes) }

    /// Another table with the same contents (a TokenTable copied, then changed).
    func copy() -> TableMemory {
        let other = TableMemory(capacity: capacity, width: width, hasValues: hasValues)
        other.control.update(from: control, count: capacity * (1 + width))
        if hasValues { other.values.update(from: values, count: capacity) }
        return other
    }
}

/// Device tokens of any width, one table per width (audiences nearly always
/// have a single width), optionally with a 4-byte value each.
public struct TokenSet {
    private var tables: [TokenTable] = []
    /// `tables[i].view`, kept beside them for lookups.
    private var views: [TableView] = []
    private let hasValues: Bool
    private let expectedCount: Int

    /// `expectedCount` sizes the first table so that it need not grow (growing
    /// briefly holds the old and the new table: 2.5 times the memory).
    public init(values: Bool = false, expectedCount: Int = 0) {
        hasValues = values
        self.expectedCount = expectedCount
    }

    public var count: Int { tables.reduce(0) { $0 + $1.count } }
    public var allocatedBytes: Int { tables.reduce(0) { $0 + $1.allocatedBytes } }

    @inline(__always)
    private func view(width: Int) -> TableView? {
        views.withUnsafeBufferPointer { v in
            for i in v.indices where v[i].width == width { return v[i] }
            return nil
        }
    }

    /// The hash the set files `token` under; computed once, it can be given
    /// to ``contains(_:hash:)`` and ``insert(_:hash:value:)`` (on another thread).
    @inline(__always)
    public static func hash(_ token: UnsafeBufferPointer<UInt8>) -> UInt64 { TokenTable.hash(token) }

    public func contains(_ token: UnsafeBufferPointer<UInt8>) -> Bool {
        contains(token, hash: Self.hash(token))
    }

    /// Starts loading where a token of `width` bytes with this ``hash(_:)``
    /// would be, so that a lookup a few rows later finds it in cache (the
    /// table is far bigger than the cache: each lookup was a miss).
    @inline(__always)
    public func prefetch(width: Int, hash: UInt64) {
        view(width: width)?.prefetch(hash: hash)
    }

    public func contains(_ token: UnsafeBufferPointer<UInt8>, hash: UInt64) -> Bool {
        withExtendedLifetime(tables) { view(width: token.count)?.contains(token, hash: hash) ?? false }
    }

    public func value(for token: UnsafeBufferPointer<UInt8>) -> UInt32? {
        withExtendedLifetime(tables) { view(width: token.count)?.value(for: token, hash: Self.hash(token)) }
    }

    /// Inserts (or replaces the value of) a token; returns whether it was new.
    @discardableResult
    public mutating func insert(_ token: UnsafeBufferPointer<UInt8>, value: UInt32 = 0) -> Bool {
        insert(token, hash: Self.hash(token), value: value)
    }

    /// ``insert(_:value:)`` with the token's ``hash(_:)`` already known.
    @discardableResult
    public mutating func insert(_ token: UnsafeBufferPointer<UInt8>, hash: UInt64, value: UInt32 = 0) -> Bool {
        precondition(!token.isEmpty)
        var index = views.withUnsafeBufferPointer { v in v.firstIndex { $0.width == token.count } }
        if index == nil {
            let capacity = max(1024, expectedCount * 5 / 4 + 16)
            tables.append(TokenTable(width: token.count, hasValues: hasValues, capacity: tables.isEmpty ? capacity : 1024))
            views.append(tables[tables.count - 1].view)
            index = tables.count - 1
        }
        let i = index!
        let inserted = tables[i].insert(token, hash: hash, value: value)
        // The table may have grown or been copied (a set copied, then changed).
        let view = tables[i].view
        if view.control != views[i].control { views[i] = view }
        return inserted
    }

    public mutating func insert(_ token: [UInt8], value: UInt32 = 0) {
        token.withUnsafeBufferPointer { _ = insert($0, value: value) }
    }

    public func contains(_ token: [UInt8]) -> Bool { token.withUnsafeBufferPointer { contains($0) } }
    public func value(for token: [UInt8]) -> UInt32? { token.withUnsafeBufferPointer { value(for: $0) } }

    public func forEach(_ body: (UnsafeBufferPointer<UInt8>, UInt32) -> Void) {
        for table in tables { table.forEach(body) }
    }
}
