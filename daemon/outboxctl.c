/* outboxctl: stub until the operator's tool lands. */
int
main(void)
{
    return 1;
}
