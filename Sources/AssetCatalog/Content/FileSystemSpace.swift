import Foundation

/// The file system a path is on, as a message names it to a user: where it is mounted, its
/// type, and the space left on it (`the file system mounted at /mnt/usb (vfat, 0 bytes
/// free)`).
struct FileSystemSpace: CustomStringConvertible {
    /// The mount point of the file system holding the path (`/` if it cannot be read).
    var mountPoint = "/"
    /// The file system's type (`ext4`, `tmpfs`), if it can be read.
    var type: String?
    /// The bytes free to this user, if they can be read.
    var available: UInt64?

    init(of path: String) {
        var stats = statvfs()
        if statvfs(path, &stats) == 0 { available = UInt64(stats.f_bavail) * UInt64(stats.f_frsize) }
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        // /proc/self/mountinfo: "id parent major:minor root mount-point options ... - type source ...".
        // The longest mount point that holds the path is its file system's; later mounts win ties.
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return }
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4, let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count else { continue }
            let mount = Self.unescaped(String(fields[4]))
            let holds = resolved == mount || resolved.hasPrefix(mount == "/" ? "/" : mount + "/")
            if holds && mount.count >= mountPoint.count {
                mountPoint = mount
                type = String(fields[dash + 1])
            }
        }
    }

    var description: String {
        let details = [type, available.map { "\(Self.bytes($0)) free" }].compactMap { $0 }
        return "the file system mounted at \(DisplayText.quoted(mountPoint))"
            + (details.isEmpty ? "" : " (\(details.joined(separator: ", ")))")
    }

    /// A mount point as mountinfo escapes it: space, tab, newline and backslash as `\ooo`.
    static func unescaped(_ text: String) -> String {
        guard text.contains("\\") else { return text }
        var bytes: [UInt8] = []
        let utf8 = Array(text.utf8)
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "\\"), i + 3 < utf8.count,
                let value = UInt8(String(decoding: utf8[i + 1...i + 3], as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                i += 4
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `bytes` as people read it: `0 bytes`, `512 bytes`, `3.2 MB`.
    static func bytes(_ bytes: UInt64) -> String {
        guard bytes >= 1000 else { return "\(bytes) byte\(bytes == 1 ? "" : "s")" }
        let units = ["kB", "MB", "GB", "TB", "PB"]
        var value = Double(bytes) / 1000
        var unit = 0
        while value >= 1000 && unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return "\(String(format: "%.1f", value)) \(units[unit])"
    }
}
