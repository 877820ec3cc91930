package io.github.pulsartxn.broker;

import static org.junit.jupiter.api.Assertions.assertThrows;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.junit.jupiter.api.Test;

/** What an entry that cannot be decoded means: REJECT only when the bytes are at fault. */
class EntryPropsTest {

    /** An entry whose buffer fails as the broker's own memory can. */
    private static Entry failing(Error error) {
        return new Entry() {
            public byte[] getData() {
                throw error;
            }

            public byte[] getDataAndRelease() {
                throw error;
            }

            public int getLength() {
                return 0;
            }

            public ByteBuf getDataBuffer() {
                throw error;
            }

            public Position getPosition() {
                return PositionFactory.create(1, 1);
            }

            public long getLedgerId() {
                return 1;
            }

            public long getEntryId() {
                return 1;
            }

            public boolean release() {
                return true;
            }
        };
    }

    private static MessageMetadata batchOf(int n) {
        MessageMetadata md = new MessageMetadata();
        md.setProducerName("p").setSequenceId(0).setPublishTime(1).setNumMessagesInBatch(n);
        return md;
    }

    @Test
    void theBrokersOwnOutOfMemoryIsNotTakenForAnUndecodableEntry() {
        // REJECT is permanent: an entry rejected for the broker's own memory would be lost
        // to the subscription; the error goes up (the filter reschedules, holding what follows)
        assertThrows(OutOfMemoryError.class, () -> EntryProps.protocolOf(
                failing(new OutOfMemoryError("Direct buffer memory")), batchOf(2)));
    }

    @Test
    void bytesThatDoNotDecodeAreUnreadable() {
        Entry garbage = new Entry() {
            private final ByteBuf buf = Unpooled.wrappedBuffer(new byte[] {0, 0, 0, 9, 1, 2});

            public byte[] getData() {
                return new byte[0];
            }

            public byte[] getDataAndRelease() {
                return new byte[0];
            }

            public int getLength() {
                return buf.readableBytes();
            }

            public ByteBuf getDataBuffer() {
                return buf;
            }

            public Position getPosition() {
                return PositionFactory.create(1, 2);
            }

            public long getLedgerId() {
                return 1;
            }

            public long getEntryId() {
                return 2;
            }

            public boolean release() {
                return true;
            }
        };
        assertThrows(EntryProps.Unreadable.class, () -> EntryProps.protocolOf(garbage, batchOf(2)));
    }
}
