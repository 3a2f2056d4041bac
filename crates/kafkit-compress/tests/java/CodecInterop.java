// Compresses or decompresses a file with the Java libraries Kafka's Java client uses:
// java.util.zip (gzip), snappy-java's SnappyOutputStream/SnappyInputStream (xerial framing),
// zstd-jni's ZstdOutputStream/ZstdInputStream, and lz4-java (frame streams set to the header the
// Java producer writes: independent 64 KiB blocks, no checksums).
//
// Usage: java CodecInterop compress|decompress gzip|snappy|lz4|zstd IN OUT
import java.io.*;
import java.nio.file.*;
import java.util.zip.*;

public class CodecInterop {
    public static void main(String[] args) throws Exception {
        String mode = args[0], codec = args[1];
        byte[] in = Files.readAllBytes(Paths.get(args[2]));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        if (mode.equals("compress")) {
            try (OutputStream os = compressor(codec, out)) {
                os.write(in);
            }
        } else {
            try (InputStream is = decompressor(codec, new ByteArrayInputStream(in))) {
                is.transferTo(out);
            }
        }
        Files.write(Paths.get(args[3]), out.toByteArray());
    }

    static OutputStream compressor(String codec, OutputStream out) throws IOException {
        switch (codec) {
            case "gzip": return new GZIPOutputStream(out, 8 * 1024);
            case "snappy": return new org.xerial.snappy.SnappyOutputStream(out);
            case "lz4": return new net.jpountz.lz4.LZ4FrameOutputStream(out,
                    net.jpountz.lz4.LZ4FrameOutputStream.BLOCKSIZE.SIZE_64KB,
                    net.jpountz.lz4.LZ4FrameOutputStream.FLG.Bits.BLOCK_INDEPENDENCE);
            case "zstd": return new com.github.luben.zstd.ZstdOutputStream(out, 3);
            default: throw new IllegalArgumentException(codec);
        }
    }

    static InputStream decompressor(String codec, InputStream in) throws IOException {
        switch (codec) {
            case "gzip": return new GZIPInputStream(in, 8 * 1024);
            case "snappy": return new org.xerial.snappy.SnappyInputStream(in);
            case "lz4": return new net.jpountz.lz4.LZ4FrameInputStream(in);
            case "zstd": return new com.github.luben.zstd.ZstdInputStream(in);
            default: throw new IllegalArgumentException(codec);
        }
    }
}
